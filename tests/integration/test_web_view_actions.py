"""The web view's actions in a real browser (headless Chromium) against the real API server and node: the start
form built from a Workflow's params, cancel/suspend/resume/retry/resubmit, Events, the workflow page, the
namespace switcher and the all-namespaces runs.

Each person runs their own `kubectl towline ui`; what a button does is what the API server lets that person do.
alice may start and change runs (towline-runner); bob and carol may only read them (towline-viewer,
towline-approver), so their writes get the API server's refusal, shown on the page, and nothing changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from tests.integration.browsersupport import (
    offered,
    page_state,
    press,
    result_text,
    runs_of,
    screenshot,
    session_of,
    until,
    wait_for_element,
)
from tests.integration.support import apply, bind_role, create, get, wait_for, wait_for_phase

from towline_dev.browser import web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration]

WORKFLOW = "nightly-report"
WRITES = ("cancel", "stop", "suspend", "resume", "retry", "resubmit")


def nightly_report(namespace: str) -> dict[str, Any]:
    """Typed params, a schedule and a webhook trigger; the run waits at bob's gate (no Job runs before it)."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": WORKFLOW, "namespace": namespace},
        "spec": {
            "params": [
                {"name": "region", "type": "string", "required": True, "description": "where to report on"},
                {"name": "days", "type": "integer", "default": 7, "description": "how far back"},
                {"name": "dry_run", "type": "boolean", "default": False},
            ],
            "triggers": [
                {"name": "nightly", "schedule": {"cron": "0 2 * * *", "timeZone": "Europe/Berlin"}},
                {"name": "on_push", "webhook": {"verify": {"scheme": "standard-webhooks",
                                                           "secretRef": {"name": "push-hook", "key": "secret"}}}},
            ],
            "steps": [
                {"id": "review", "approval": {"message": "Send the report?", "approvers": {"users": ["bob"]},
                                              "expiresAfter": "30m"}},
                {"id": "send", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {}, "fields": {"sent": "true"}}},
            ],
        },
    }


@pytest.fixture
def report_namespace(towline_installed: ControlPlane, namespace: str) -> str:
    cluster = towline_installed
    bind_role(cluster, namespace, "towline-runner", users=("alice",))
    bind_role(cluster, namespace, "view", users=("alice",))  # Events are core/v1: the built-in view reads them
    bind_role(cluster, namespace, "towline-viewer", users=("bob",))
    bind_role(cluster, namespace, "towline-approver", users=("carol",))
    cluster.kubectl("create", "secret", "generic", "push-hook", "-n", namespace, "--from-literal=secret=whsec_dGVzdA==")
    apply(cluster, nightly_report(namespace))
    return namespace


def test_alice_starts_a_run_from_the_form_and_bob_and_carol_see_the_api_servers_refusals(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, report_namespace: str, chromium: Any,
    tmp_path: Path,
) -> None:
    cluster, ns, browser = towline_installed, report_namespace, chromium
    with web_view(cluster.kubeconfig, context_name("alice"), ns) as alice, \
            web_view(cluster.kubeconfig, context_name("bob"), ns) as bob, \
            web_view(cluster.kubeconfig, context_name("carol"), ns) as carol:
        # The workflow page: workflows show's model (params, triggers with the webhook path, the schedule's next
        # slot as the operator wrote it) and the graph.
        next_slot = wait_for("the operator's next slot of the schedule", lambda: next(
            (slot.get("nextScheduleTime") for slot in ((get(cluster, "workflows.towline.dev", WORKFLOW, ns) or {})
                                                       .get("status") or {}).get("schedules") or []
             if slot.get("trigger") == "nightly" and slot.get("nextScheduleTime")), None), 60)
        alice.sign_in(browser)
        browser.get(alice.url(f"/workflows/{WORKFLOW}"))
        hook = wait_for_element(browser, '#triggers tr[data-trigger="on_push"]', "the webhook trigger")
        assert f"/hooks/{ns}/{WORKFLOW}/on_push" in hook.text and "standard-webhooks" in hook.text
        nightly = browser.find_element(By.CSS_SELECTOR, '#triggers tr[data-trigger="nightly"]').text
        assert "0 2 * * *" in nightly and "Europe/Berlin" in nightly and f"next {next_slot}" in nightly, nightly
        facts = browser.find_element(By.CSS_SELECTOR, "dl.facts").text
        assert f"Next schedule\n{next_slot}" in facts, facts
        assert {n.get_attribute("data-step") for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")} == \
            {"review", "send"}
        assert "(required)" in browser.find_element(By.CSS_SELECTOR, '#params tr[data-param="region"]').text
        assert "7" in browser.find_element(By.CSS_SELECTOR, '#params tr[data-param="days"]').text
        screenshot(browser, "web-view-workflow.png", tmp_path)

        # The form: a missing required param and a days that is no number are named at their fields; nothing
        # is created.
        browser.find_element(By.CSS_SELECTOR, "#start-link").click()
        days = wait_for_element(browser, "#param-days", "the days field")
        days.send_keys("soon")
        browser.find_element(By.CSS_SELECTOR, "#start-run").click()
        refusal = result_text(browser, "#start-result", "the refused form")
        assert "nothing was created" in refusal, refusal
        errors = {e.get_attribute("data-error-for"): e.text for e in
                  browser.find_elements(By.CSS_SELECTOR, ".field-error")}
        assert "required" in errors["region"] and "whole number" in errors["days"], errors
        screenshot(browser, "web-view-start.png", tmp_path)
        assert runs_of(cluster, ns) == {}, "a refused form creates no run"

        # Filled in right, the run is created as alice: requestedBy as the API server saw her.
        browser.find_element(By.CSS_SELECTOR, "#param-region").send_keys("emea")
        days.clear()
        days.send_keys("3")
        browser.find_element(By.CSS_SELECTOR, "#start-run").click()
        created = result_text(browser, "#start-result", "the started run")
        assert "created (requested by alice)" in created, created
        (run,) = runs_of(cluster, ns)
        spec = runs_of(cluster, ns)[run]["spec"]
        assert spec["requestedBy"] == "alice" and spec["params"] == {"region": "emea", "days": 3, "dry_run": False}
        wait_for_phase(cluster, ns, run, {"AwaitingApproval"})

        # The run page offers what applies: cancel, stop, suspend, resubmit (not resume, not retry). Suspend, then
        # resume; the Events the operator recorded appear.
        browser.get(alice.url(f"/runs/{run}"))
        until(browser, lambda d: offered(d) == ["cancel", "stop", "suspend", "resubmit"], "a waiting run's operations")
        assert "suspended" in press(browser, "suspend")
        wait_for("spec.suspend", lambda: (get(cluster, "workflowruns.towline.dev", run, ns) or {})["spec"]
                 .get("suspend") is True)
        until(browser, lambda d: offered(d) == ["cancel", "stop", "resume", "resubmit"], "resume once suspended")
        assert "resumed" in press(browser, "resume")
        wait_for("spec.suspend lifted", lambda: (get(cluster, "workflowruns.towline.dev", run, ns) or {})["spec"]
                 .get("suspend") is False)
        wait_for_element(browser, '#events tr[data-reason="ApprovalRequested"]', "the run's Events")
        screenshot(browser, "web-view-run-actions.png", tmp_path)

        # bob may read the run, not change it: the API server refuses his cancel, the page says so in its words.
        bob.sign_in(browser)
        browser.get(bob.url(f"/runs/{run}"))
        refused = press(browser, "cancel")
        assert "refused (403)" in refused and "bob" in refused and "forbidden" in refused, refused
        assert "cancel" not in (get(cluster, "workflowruns.towline.dev", run, ns) or {})["spec"]

        # carol may not create runs: the form passes the params check, the API server refuses the run.
        carol.sign_in(browser)
        browser.get(carol.url(f"/workflows/{WORKFLOW}/start"))
        wait_for_element(browser, "#param-region", "carol's form").send_keys("apac")
        browser.find_element(By.CSS_SELECTOR, "#start-run").click()
        refused = result_text(browser, "#start-result", "carol's start")
        assert "refused (403)" in refused and "carol" in refused and "forbidden" in refused, refused
        assert list(runs_of(cluster, ns)) == [run], "nothing was created for carol"

        # alice cancels; the ended run offers retry and resubmit, each a new run requested by alice.
        browser.get(alice.url(f"/runs/{run}"))
        assert "cancel requested" in press(browser, "cancel")
        wait_for_phase(cluster, ns, run, {"Cancelled"})
        until(browser, lambda d: offered(d) == ["retry", "resubmit"], "retry and resubmit once the run ended")
        assert "resubmit of" in press(browser, "resubmit")
        assert "retry of" in press(browser, "retry")
        new = {name: r["spec"] for name, r in runs_of(cluster, ns).items() if name != run}
        assert len(new) == 2 and all(spec["requestedBy"] == "alice" for spec in new.values())
        resubmitted = next(spec for spec in new.values() if "retryOf" not in spec)
        retried = next(spec for spec in new.values() if "retryOf" in spec)
        assert resubmitted["params"] == spec["params"] and retried["retryOf"]["run"] == run

        # Namespaces: alice may not list them, so the switcher offers hers; a namespace she may not read says
        # so on its page, never an error page; the all-namespaces view shows the runs she may list.
        browser.get(alice.url("/runs"))
        switcher = wait_for_element(browser, "#namespace", "the namespace switcher")
        assert [o.text for o in switcher.find_elements(By.CSS_SELECTOR, "option")] == [ns]
        browser.get(alice.url("/ns/kube-system/runs"))
        until(browser, lambda d: "The API server refused (403)" in d.find_element(By.TAG_NAME,
                                     "main").text, f"the refusal for kube-system; {page_state(browser)}", 30)
        browser.get(alice.url("/all/runs"))
        wait_for_element(browser, f'#runs tr[data-run="{run}"][data-namespace="{ns}"]', "alice's run in every ns")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 3


def started_by_alice(cluster: ControlPlane, namespace: str, name: str) -> str:
    create(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                     "metadata": {"name": name, "namespace": namespace},
                     "spec": {"workflowRef": {"name": WORKFLOW}, "requestedBy": "alice", "params": {"region": "emea"}}},
           user="alice")
    return name


def test_each_write_needs_the_pages_token_its_origin_and_the_persons_right(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, report_namespace: str,
) -> None:
    """A page of another site posts to the local server with the person's cookie; bob, who may only read runs,
    posts with everything the page has: the web view adds no power, and nothing changes."""
    cluster, ns = towline_installed, report_namespace
    waiting, ended = (started_by_alice(cluster, ns, name) for name in ("waiting", "ended"))
    for name in (waiting, ended):
        wait_for_phase(cluster, ns, name, {"AwaitingApproval"})
    cluster.kubectl("patch", "workflowruns.towline.dev", ended, "-n", ns, "--type", "merge", "-p",
                    '{"spec": {"cancel": true}}')
    wait_for_phase(cluster, ns, ended, {"Cancelled"})
    before = {name: (run["spec"], run["metadata"].get("annotations")) for name, run in runs_of(cluster, ns).items()}
    target = {action: ended if action in ("retry", "resubmit") else waiting for action in WRITES}
    writes: dict[str, dict[str, Any]] = {f"/api/runs/{target[action]}/{action}": {} for action in WRITES}
    writes[f"/api/workflows/{WORKFLOW}/runs"] = {"params": {"region": "emea"}}

    with web_view(cluster.kubeconfig, context_name("alice"), ns) as alice, \
            web_view(cluster.kubeconfig, context_name("bob"), ns) as bob, \
            httpx.Client() as alices_browser, httpx.Client() as bobs_browser:
        token = session_of(alice, alices_browser)
        for path, body in writes.items():
            without_token = alices_browser.post(alice.url(path), json=body, headers={"Origin": alice.base})
            assert without_token.status_code == 403, (path, without_token.text)
            assert "X-Towline-CSRF" in without_token.text, without_token.text
            other_site = alices_browser.post(alice.url(path), json=body, headers={
                "Origin": "https://attacker.example", "X-Towline-CSRF": token})
            assert other_site.status_code == 403 and "Origin" in other_site.text, (path, other_site.text)

        bobs_token = session_of(bob, bobs_browser)
        for path, body in writes.items():
            answer = bobs_browser.post(bob.url(path), json=body,
                                       headers={"Origin": bob.base, "X-Towline-CSRF": bobs_token})
            assert answer.status_code == 403, (path, answer.text)
            message = answer.json()["message"]
            assert '"bob" cannot' in message and "workflowruns" in message, (path, message)

    after = {name: (run["spec"], run["metadata"].get("annotations")) for name, run in runs_of(cluster, ns).items()}
    assert after == before, "no write changed a run or created one"

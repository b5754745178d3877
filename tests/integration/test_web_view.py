"""`kubectl towline ui` in a real browser (headless Chromium), against the local control plane.

Each person runs their own web view with their own kubeconfig context: what the
page shows and what its buttons do is what the API server lets that person do.
The screenshots in the README come from here (TOWLINE_UPDATE_SCREENSHOTS=1
writes them to docs/images/).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from tests.integration import browsersupport
from tests.integration.browsersupport import live_wait, screenshot
from tests.integration.support import (
    ScriptedServer,
    apply,
    bind_role,
    get,
    start_run,
    step_status,
    wait_for_phase,
)

from towline_dev.browser import headless_chromium, web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

CANARY = "canary-secret-value-7f3e91d2"


def twelve_steps(namespace: str, api: str) -> dict[str, Any]:
    """Twelve steps: a call with a credential, a fan-out and join, a skipped branch, a four-eyes gate."""
    transform = {"action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}
    fan = [f"shape_{region}" for region in ("emea", "apac", "amer", "latam")]
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "quarterly-close", "namespace": namespace},
        "spec": {
            "steps": [
                {"id": "fetch_ledger", "action": "http.request", "credentials": {"ledger": "ledger-api"},
                 "with": {"url": f"{api}/ledger", "select": "response.body",
                          "auth": {"bearer": {"credential": "ledger", "key": "token"}}}},
                *({"id": step, "needs": ["fetch_ledger"], **transform} for step in fan),
                {"id": "page_oncall", "needs": ["fetch_ledger"], "when": "steps.fetch_ledger.output.late",
                 **transform},
                {"id": "reconcile", "needs": fan, **transform},
                {"id": "review", "needs": ["reconcile"],
                 "approval": {"message": "Close the quarter?", "approvers": {"users": ["bob", "carol"]},
                              "fourEyes": True, "expiresAfter": "30m"}},
                {"id": "post_journal", "needs": ["review"], "action": "http.request",
                 "with": {"url": f"{api}/journal", "method": "POST", "json": {"closed": True}}},
                {"id": "archive", "needs": ["post_journal"], **transform},
                {"id": "notify_controllers", "needs": ["post_journal"], **transform},
            ],
            "finally": [{"id": "report", **transform}],
        },
    }


@pytest.fixture
def chromium() -> Iterator[Any]:
    # Wide enough that the README's screenshot shows the whole twelve-step graph without scrolling.
    with headless_chromium(print, width=2000, height=1000) as driver:
        yield driver


@pytest.fixture
def shown_team(towline_installed: ControlPlane, shown_namespace: str) -> str:
    """`shown_namespace` where carol may start runs and alice, bob and carol may decide (as team_namespace)."""
    bind_role(towline_installed, shown_namespace, "towline-runner", users=("carol", "alice", "bob"))
    bind_role(towline_installed, shown_namespace, "towline-approver", users=("alice", "bob", "carol"))
    return shown_namespace


def wait_for_element(driver: Any, css: str, what: str, timeout: float = 120) -> Any:
    """browsersupport's, with the canary cut from a failure's page text."""
    return browsersupport.wait_for_element(driver, css, what, timeout, hidden=(CANARY,))


def node_phase(driver: Any, step: str) -> str | None:
    found = driver.find_elements(By.CSS_SELECTOR, f'#graph g.node[data-step="{step}"]')
    return found[0].get_attribute("data-phase") if found else None


def assert_no_canary(driver: Any) -> None:
    assert CANARY not in driver.page_source


def test_the_launch_url_opens_one_session_once_and_holds_no_reusable_secret(
    towline_installed: ControlPlane, team_namespace: str
) -> None:
    """A local user reads the launch URL from the browser's command line (/proc/PID/cmdline) or its history."""
    cluster, ns = towline_installed, team_namespace
    with web_view(cluster.kubeconfig, context_name("carol"), ns) as view, \
            httpx.Client() as browser, httpx.Client() as reader:
        opened = browser.get(view.launch_url)
        assert opened.status_code == 303 and opened.headers["Location"] == "/runs"
        cookie = opened.headers["Set-Cookie"]
        name, _, rest = cookie.partition("=")
        session = rest.split(";", 1)[0]
        assert name == f"towline-{view.base.rsplit(':', 1)[1]}" and session not in view.launch_url
        assert {"httponly", "samesite=strict", "path=/"} <= {a.strip().lower() for a in cookie.split(";")[1:]}
        assert browser.get(view.url("/runs")).status_code == 200, "the session cookie serves the pages"

        # The reader replays the URL after the browser: refused, and no session for them.
        replayed = reader.get(view.launch_url)
        assert replayed.status_code == 403 and "already used" in replayed.text
        assert "set-cookie" not in replayed.headers
        assert reader.get(view.url("/runs")).status_code == 403
        assert reader.get(view.url("/api/workflows")).status_code == 403
        # ...which also ended the session the code opened (had the reader been first, it would have been theirs).
        assert browser.get(view.url("/runs")).status_code == 403
        assert not any(session in line for line in view.printed), "the session never reaches the terminal"


def test_without_a_session_or_from_a_foreign_host_or_origin_a_request_is_refused(
    towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with web_view(cluster.kubeconfig, context_name("carol"), ns) as view, \
            httpx.Client() as http, httpx.Client() as stranger:
        base = view.base
        port = base.rsplit(":", 1)[1]
        forger = httpx.Client(cookies={f"towline-{port}": view.code})  # the code is not a session
        assert http.get(view.launch_url).status_code == 303
        page = http.get(f"{base}/runs")
        assert page.status_code == 200 and "carol" in page.text
        assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")
        assert page.headers["Referrer-Policy"] == "no-referrer"

        refused = {
            "no session": stranger.get(f"{base}/runs"),
            "the code as a session": forger.get(f"{base}/runs"),
            "no session on a stream": stranger.get(f"{base}/events/runs"),
            "no session on the JSON": stranger.get(f"{base}/api/workflows"),
            "a wrong code": stranger.get(f"{base}/login", params={"code": view.code[::-1]}),
            "rebound host name": http.get(f"{base}/runs", headers={"Host": f"attacker.example:{port}"}),
            "foreign origin": http.get(f"{base}/api/workflows", headers={"Origin": "https://attacker.example"}),
            "cross-site fetch": http.get(f"{base}/api/workflows", headers={"Sec-Fetch-Site": "cross-site"}),
            "write from another site": http.post(f"{base}/api/approvals/any",
                                                 headers={"Origin": "https://attacker.example"},
                                                 json={"decision": "Approved"}),
            "write without an origin": http.post(f"{base}/api/approvals/any", json={"decision": "Approved"}),
        }
        forger.close()
        assert {what: r.status_code for what, r in refused.items()} == {what: 403 for what in refused}
        assert "no session" in refused["no session"].text and "Host" in refused["rebound host name"].text
        assert "Origin" in refused["foreign origin"].text

        # From the page's own origin but without the page's CSRF token: refused too.
        no_token = http.post(f"{base}/api/approvals/no-such-approval", headers={"Origin": base},
                             json={"decision": "Approved"})
        assert no_token.status_code == 403 and "X-Towline-CSRF" in no_token.text
        # With both, the request reaches the API server, which answers as carol.
        csrf = re.search(r'<meta name="towline-csrf" content="([^"]+)">', page.text)
        assert csrf is not None, "the page carries its CSRF token"
        allowed = http.post(f"{base}/api/approvals/no-such-approval",
                            headers={"Origin": base, "X-Towline-CSRF": csrf[1]}, json={"decision": "Approved"})
        assert allowed.status_code == 404, allowed.text


def test_runs_graph_logs_and_approvals_live_in_the_browser_as_each_person(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, shown_team: str,
    chromium: Any, tmp_path: Path,
) -> None:
    cluster, ns = towline_installed, shown_team
    bind_role(cluster, ns, "towline-log-reader", users=("carol",))
    cluster.kubectl("create", "secret", "generic", "ledger-api", "-n", ns, f"--from-literal=token={CANARY}")
    browser = chromium
    with ScriptedServer() as api, \
            web_view(cluster.kubeconfig, context_name("carol"), ns) as carol, \
            web_view(cluster.kubeconfig, context_name("bob"), ns) as bob:
        ledger = api.script("/ledger", (200, {"late": False, "rows": 4}, {}))
        journal = api.script("/journal", (200, {"ok": True}, {}))
        apply(cluster, twelve_steps(ns, api.url))

        # The runs list is open before the run exists: the row appears and moves on without a reload.
        carol.sign_in(browser)
        browser.get(carol.url("/runs"))
        wait_for_element(browser, "#runs tbody", "the runs table")
        run = start_run(cluster, ns, "quarterly-close", "close-q4")
        wait_for_element(browser, f'#runs tr[data-run="{run}"]', "the new run's row")
        live_wait(browser, 180, 0.2).until(
            lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run}"]').get_attribute("data-phase")
            == "AwaitingApproval", message="the row to show AwaitingApproval")
        live_wait(browser, 30).until(lambda d: "carol" in d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run}"]').text,
                                     message="the row to name carol as the requester")
        assert_no_canary(browser)

        # The run page: twelve nodes laid out, phases as recorded, the gate waiting.
        browser.get(carol.url(f"/runs/{run}?step=fetch_ledger"))
        wait_for_element(browser, '#graph g.node[data-phase="Succeeded"]', "a finished step in the graph")
        nodes = browser.find_elements(By.CSS_SELECTOR, "#graph g.node")
        assert len(nodes) == 12
        phases = {step: node_phase(browser, step) for step in (
            "fetch_ledger", "shape_emea", "reconcile", "page_oncall", "review", "post_journal", "report")}
        assert phases == {"fetch_ledger": "Succeeded", "shape_emea": "Succeeded", "reconcile": "Succeeded",
                          "page_oncall": "Skipped", "review": "Running", "post_journal": "Pending",
                          "report": "Pending"}
        positions = {n.get_attribute("data-step"): n.get_attribute("transform") for n in nodes}
        assert len(set(positions.values())) == 12, "the layout gives every step its own place"

        # The step's logs, read from the kubelet through the API server as carol.
        logs = wait_for_element(browser, "#logs", "the log pane")
        live_wait(browser, 90, 0.3).until(
            lambda d: "running http.request" in logs.text, message="the step's log lines")
        assert "==> attempt 1" in logs.text
        assert ledger.requests[0]["headers"]["Authorization"] == f"Bearer {CANARY}", "the step used the Secret"
        assert_no_canary(browser)

        # Carol requested the run: the admission policy refuses her approval, and the page says why.
        browser.find_element(By.CSS_SELECTOR, '#graph g.node[data-step="review"]').click()
        box = wait_for_element(browser, "#step .decide-box", "the approve and reject buttons")
        screenshot(browser, "web-view-run.png", tmp_path)
        box.find_element(By.CSS_SELECTOR, "button.approve").click()
        live_wait(browser, 30, 0.2).until(
            lambda d: "refused" in box.find_element(By.CSS_SELECTOR, ".result").get_attribute("class"),
            message="carol's refusal on the page")
        refusal = box.find_element(By.CSS_SELECTOR, ".result").text
        assert "four-eyes" in refusal, refusal
        approval = step_status(get(cluster, "workflowruns.towline.dev", run, ns), "review")["approvalName"]
        assert "decision" not in get(cluster, "approvals.towline.dev", approval, ns)["spec"]

        # Bob approves from his own view's approvals page; the run goes on, and carol's graph follows it.
        carol_tab = browser.current_window_handle
        browser.switch_to.new_window("tab")
        bob.sign_in(browser)  # the same browser: each server's session cookie has its own name
        browser.get(bob.url("/approvals"))
        card = wait_for_element(browser, f'#open .approval[data-approval="{approval}"]', "the waiting approval")
        assert "Close the quarter?" in card.text and "carol" in card.text
        screenshot(browser, "web-view-approvals.png", tmp_path)
        assert_no_canary(browser)
        card.find_element(By.CSS_SELECTOR, "button.approve").click()
        # The row is drawn again as the operator closes the Approval: read it afresh until it says who decided.
        row = f'tbody tr[data-approval="{approval}"]'
        live_wait(browser, 120).until(
            lambda d: all(word in d.find_element(By.CSS_SELECTOR, row).text for word in ("Approved", "bob")),
            message="the decided approval's row to say Approved by bob")
        assert get(cluster, "approvals.towline.dev", approval, ns)["spec"]["decidedBy"] == "bob"

        browser.switch_to.window(carol_tab)
        live_wait(browser, 180, 0.3).until(
            lambda d: node_phase(d, "report") == "Succeeded" and node_phase(d, "archive") == "Succeeded",
            message="the rest of the run in carol's graph")
        assert node_phase(browser, "review") == "Succeeded" and node_phase(browser, "post_journal") == "Succeeded"
        assert wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
        assert [json.loads(r["body"]) for r in journal.requests] == [{"closed": True}]
        assert_no_canary(browser)

        # The workflow's page: its definition as committed (credential names, never values) and its runs.
        browser.get(carol.url("/workflows/quarterly-close"))
        definition = wait_for_element(browser, "#definition", "the workflow's YAML")
        assert "ledger-api" in definition.text and "fetch_ledger" in definition.text
        wait_for_element(browser, f'tr[data-run="{run}"]', "the workflow's run")
        browser.get(carol.url("/workflows"))
        row = wait_for_element(browser, 'tr[data-workflow="quarterly-close"]', "the workflows list")
        assert "manual" in row.text and "True" in row.text, row.text

        def last_run_shown(driver: Any) -> bool:  # the page is a snapshot; lastRun follows the run's end
            driver.refresh()
            rows = driver.find_elements(By.CSS_SELECTOR, 'tr[data-workflow="quarterly-close"]')
            return bool(rows) and run in rows[0].text and "Succeeded" in rows[0].text

        live_wait(browser, 60, 1).until(last_run_shown, message="the workflow's last run")
        assert_no_canary(browser)


def gated_push_with_compensation(namespace: str, api: str) -> dict[str, Any]:
    """The approval policy puts bob's gate before the mutating push; push fails and its compensation runs."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "guarded-push", "namespace": namespace},
        "spec": {
            "policy": {"approval": {"requireForMutatingActions": True, "approvers": {"users": ["bob"]},
                                    "expiresAfter": "30m"}},
            "steps": [{"id": "push", "action": "http.request", "retry": {"limit": 0}, "onFailure": "undo",
                       "with": {"url": f"{api}/push", "method": "POST", "json": {"n": 1}}}],
            "compensations": [{"id": "undo", "action": "data.transform",
                               "with": {"data": {}, "fields": {"undone": "true"}}}],
        },
    }


def test_the_run_page_draws_the_policys_gate_with_its_decision_and_the_compensation_a_failure_ran(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, chromium: Any,
) -> None:
    cluster, ns = towline_installed, team_namespace
    browser = chromium
    with ScriptedServer() as api, web_view(cluster.kubeconfig, context_name("bob"), ns) as bob:
        push = api.script("/push", (409, {"error": "conflict"}, {}))
        apply(cluster, gated_push_with_compensation(ns, api.url))
        run = start_run(cluster, ns, "guarded-push", "guarded-1")
        bob.sign_in(browser)
        browser.get(bob.url(f"/runs/{run}"))
        gate = '#graph g.node[data-step="push__approval"]'
        wait_for_element(browser, f'{gate}[data-kind="policy-gate"][data-phase="Running"]', "the policy's gate")
        browser.find_element(By.CSS_SELECTOR, gate).click()
        box = wait_for_element(browser, "#step .decide-box", "the gate's approve and reject buttons")
        box.find_element(By.CSS_SELECTOR, "button.approve").click()
        # The gate's panel is drawn again as the run moves on: read it afresh until it says who decided.
        live_wait(browser, 60).until(lambda d: node_phase(d, "push__approval") == "Succeeded" and "Approved by bob"
                                     in d.find_element(By.CSS_SELECTOR, "#step").text,
                                     message="bob's decision on the gate's panel")
        undo = '#graph g.node[data-step="undo"][data-section="compensations"]'
        wait_for_element(browser, f'{undo}[data-phase="Succeeded"]', "the compensation push's failure ran", 180)
        assert node_phase(browser, "push") == "Failed" and node_phase(browser, "push__approval") == "Succeeded"
        assert len(browser.find_elements(By.CSS_SELECTOR, "#graph path.edge.failure")) == 1, "push -> undo, dashed"
        assert [json.loads(r["body"]) for r in push.requests] == [{"n": 1}], "once, after the gate"

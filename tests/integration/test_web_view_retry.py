"""The web view's retry offers what `kubectl towline retry` does: `--workflow-changed` ("fix it in git, then retry
from the failed step") and `-p NAME=VALUE`, in a real browser (headless Chromium) against the real API server and
node, through the plugin's own retry (towline.plugin.runactions, towline.plugin.retryplan).

alice (towline-runner) retries a run whose first step succeeded and whose gate bob rejected, after the Workflow
changed. The plain retry is what the CLI's is (a run the operator refuses: the Workflow changed since). The page
refuses, in the plugin's words and before anything is created, what the CLI refuses: a param that is not of its
type (named at its field), a retry whose succeeded step now differs. Then the retry it allows is created as alice,
reusing that step, with the changed param, and the operator starts it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from tests.integration.attacks.attack_support import gate_approval, jobs_of, patch_as
from tests.integration.browsersupport import offered, press, runs_of, until, wait_for_element
from tests.integration.support import apply, bind_role, create, get, ready, step_status, wait_for_phase

from towline_dev.browser import web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration]

WORKFLOW = "ship"
RUN = "ship-1"


def ship(namespace: str, *, field: str = "region", message: str = "Ship it?") -> dict[str, Any]:
    """prepare (reads params.region) -> review (bob decides) -> send."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": WORKFLOW, "namespace": namespace},
        "spec": {
            "params": [{"name": "region", "type": "string", "required": True},
                       {"name": "days", "type": "integer", "default": 7}],
            "steps": [
                {"id": "prepare", "action": "data.transform",
                 "with": {"data": {"region": "${{ params.region }}"}, "fields": {field: "data.region"}}},
                {"id": "review", "needs": ["prepare"],
                 "approval": {"message": message, "approvers": {"users": ["bob"]}}},
                {"id": "send", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {}, "fields": {"sent": "true"}}},
            ],
        },
    }


def change_workflow(cluster: ControlPlane, namespace: str, manifest: dict[str, Any]) -> None:
    """Apply as a git sync would, and wait until the operator has seen this generation."""
    apply(cluster, manifest)
    ready(cluster, "workflows.towline.dev", WORKFLOW, namespace)


def retry_with(driver: Any, *, workflow_changed: bool, params: dict[str, str]) -> str:
    """Open the retry's options, set them, press Retry; the page's answer."""
    options = wait_for_element(driver, "#retry-options", "the retry's options")
    if options.get_attribute("open") is None:
        options.find_element(By.TAG_NAME, "summary").click()
    wait_for_element(driver, "#retry-options[data-ready]", "the retry's param fields")
    box = driver.find_element(By.CSS_SELECTOR, "#retry-workflow-changed")
    if box.is_selected() != workflow_changed:
        box.click()
    for field in driver.find_elements(By.CSS_SELECTOR, "#retry-params input, #retry-params textarea"):
        field.clear()
        field.send_keys(params.get(str(field.get_attribute("data-param")), ""))
    return press(driver, "retry")


def test_alice_retries_from_the_failed_step_under_the_changed_workflow_with_a_changed_param(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str, chromium: Any,
) -> None:
    cluster, ns, browser = towline_installed, namespace, chromium
    bind_role(cluster, ns, "towline-runner", users=("alice",))
    bind_role(cluster, ns, "towline-approver", users=("bob",))
    change_workflow(cluster, ns, ship(ns))
    create(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                     "metadata": {"name": RUN, "namespace": ns},
                     "spec": {"workflowRef": {"name": WORKFLOW}, "requestedBy": "alice",
                              "params": {"region": "emea"}}}, user="alice")
    approval = gate_approval(cluster, ns, RUN, "review")
    assert step_status(wait_for_phase(cluster, ns, RUN, {"AwaitingApproval"}), "prepare")["phase"] == "Succeeded"
    assert patch_as(cluster, "bob", "approval", approval, ns,
                    {"spec": {"decision": "Rejected", "decidedBy": "bob", "reason": "not today"}}).returncode == 0
    wait_for_phase(cluster, ns, RUN, {"Failed"})
    # Fixed in git: the gate's message changes, prepare (which succeeded) does not.
    change_workflow(cluster, ns, ship(ns, message="Ship it, now that the fix is in?"))

    with web_view(cluster.kubeconfig, context_name("alice"), ns) as alice:
        alice.sign_in(browser)
        browser.get(alice.url(f"/runs/{RUN}"))
        until(browser, lambda d: offered(d) == ["retry", "resubmit"], "retry and resubmit of the failed run")

        # The plain retry does what the CLI's does: a new run of the run's copy, which the operator refuses at
        # once, the Workflow having changed since.
        plain = re.search(r"workflowrun/(\S+) created: retry of ship-1, reusing prepare", press(browser, "retry"))
        assert plain, "the plain retry's answer"
        stale = wait_for_phase(cluster, ns, plain[1], {"Failed", "AwaitingApproval", "Succeeded"})
        assert stale["status"]["phase"] == "Failed" and "changed since run" in stale["status"]["message"], stale
        assert jobs_of(cluster, ns, plain[1]) == []
        before = set(runs_of(cluster, ns))

        # A param that is not of its type is named at its field; nothing is created.
        refused = retry_with(browser, workflow_changed=True, params={"days": "soon"})
        assert "refused (400)" in refused and "nothing was created" in refused, refused
        days_error = browser.find_element(By.CSS_SELECTOR, '#retry-options .field-error[data-error-for="days"]')
        assert "whole number" in days_error.text, days_error.text
        assert set(runs_of(cluster, ns)) == before

        # Now prepare differs too: its output cannot be reused, and the refusal names it.
        change_workflow(cluster, ns, ship(ns, field="where", message="Ship it, now that the fix is in?"))
        refused = retry_with(browser, workflow_changed=True, params={"days": "5"})
        assert "refused (409)" in refused and "step(s) prepare succeeded in run ship-1 but differ" in refused, refused
        assert set(runs_of(cluster, ns)) == before

        # prepare as it was: the retry reruns the failed gate under the Workflow now, with days=5, as alice.
        change_workflow(cluster, ns, ship(ns, message="Ship it, now that the fix is in?"))
        created = retry_with(browser, workflow_changed=True, params={"days": "5"})
        assert "retry of ship-1 under the Workflow as it is now, with days=5, reusing prepare" in created, created

    (new,) = set(runs_of(cluster, ns)) - before
    spec = runs_of(cluster, ns)[new]["spec"]
    # As `kubectl towline retry -p days=5` writes it: the changed param; the others come from the run retried.
    assert spec["requestedBy"] == "alice" and spec["params"] == {"days": 5}, spec
    assert spec["retryOf"] == {"run": RUN, "reuse": ["prepare"], "workflowChanged": True}, spec["retryOf"]
    # The operator takes it: prepare's output is reused (no Job of the new run), and the changed gate waits again.
    waiting = wait_for_phase(cluster, ns, new, {"AwaitingApproval"})
    assert waiting["status"]["params"] == {"region": "emea", "days": 5}, waiting["status"]
    assert step_status(waiting, "prepare")["phase"] == "Succeeded"
    assert jobs_of(cluster, ns, new) == []
    gate = get(cluster, "approvals.towline.dev", gate_approval(cluster, ns, new, "review"), ns) or {}
    assert gate["spec"]["message"] == "Ship it, now that the fix is in?", gate["spec"]

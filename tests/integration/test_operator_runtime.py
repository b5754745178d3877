"""The runtime under failure: a run whose reconcile always fails is retried a bounded number of
times and then marked, once, while other runs progress."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.support import apply, get, list_objects, start_run, wait_for, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = pytest.mark.integration

MAX_RETRIES = 4


@pytest.fixture
def small_budget_operator(towline_operator: OperatorProcess, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The session's operator, replaced for one test by one that gives up after four retries."""
    towline_operator.stop()
    replacement = OperatorProcess(
        # The session operator's identity: the Lease passes straight back to it afterwards.
        kubeconfig=towline_operator.kubeconfig, log_path=tmp_path / "operator.log", identity=towline_operator.identity,
        settings={"TOWLINE_RECONCILE_MAX_RETRIES": str(MAX_RETRIES)},
    ).start()
    yield replacement
    replacement.stop()
    towline_operator.start()


def condition(run: dict[str, object], kind: str) -> dict[str, str] | None:
    for found in (run.get("status") or {}).get("conditions") or []:  # type: ignore[attr-defined]
        if found["type"] == kind:
            return dict(found)
    return None


def warning_events(cluster: ControlPlane, namespace: str, run: str, reason: str) -> list[dict[str, object]]:
    return [e for e in list_objects(cluster, "events", namespace)
            if e["involvedObject"].get("name") == run and e.get("reason") == reason]


def test_a_run_that_always_fails_is_marked_once_and_others_progress(
    small_budget_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "one", "namespace": ns},
                    "spec": {"steps": [{"id": "s0", "action": "data.transform",
                                        "with": {"data": {}, "fields": {"a": "1"}}}]}})
    # A valid WorkflowRun name, but too long for the label every Job of the run carries (63):
    # the API server refuses each Job, so every pass fails the same way.
    poison = start_run(cluster, ns, "one", "poison-" + "x" * 70)
    healthy = start_run(cluster, ns, "one", "healthy")
    assert wait_for_phase(cluster, ns, healthy, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"

    def marked() -> dict[str, str] | None:
        found = get(cluster, "workflowrun", poison, ns)
        return condition(found, "ReconcileFailing") if found else None

    failing = wait_for("the poison run's ReconcileFailing condition", marked, timeout=120)
    assert failing["status"] == "True"
    assert failing["reason"] == "RetryBudgetExhausted"
    assert f"{MAX_RETRIES + 1} reconcile passes in a row failed" in failing["message"]
    assert "422" in failing["message"] or "Invalid" in failing["message"], failing["message"]
    assert list_objects(cluster, "jobs", ns, f"towline.dev/run={healthy}"), "the healthy run had its Job"

    # A later change to the run gives it one more pass; it fails again without a second report.
    cluster.kubectl("annotate", "workflowrun", poison, "-n", ns, "example.com/touched=1")
    second = start_run(cluster, ns, "one", "after-the-poison")
    assert wait_for_phase(cluster, ns, second, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
    events = warning_events(cluster, ns, poison, "ReconcileFailing")
    assert len(events) == 1, events
    assert events[0].get("count", 1) == 1
    assert marked() == failing, "the condition is written once, not on every pass"
    log = small_budget_operator.log_text()
    assert log.count(f"{poison}: {MAX_RETRIES + 1} passes failed; giving up") == 1, log[-3000:]

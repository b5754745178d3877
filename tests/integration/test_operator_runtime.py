"""The runtime under failure: a run whose reconcile always fails is retried a bounded number of
times and then marked, once, while other runs progress."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.support import apply, get, list_objects, start_run, wait_for, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_USER, OperatorProcess

pytestmark = pytest.mark.integration

MAX_RETRIES = 4


@pytest.fixture
def small_budget_operator(towline_operator: OperatorProcess, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The session's operator, replaced for one test by one that gives up after four retries."""
    towline_operator.stop()
    # The session operator's identity, Lease and namespaces: the Lease passes straight back to it afterwards.
    replacement = dataclasses.replace(
        towline_operator, log_path=tmp_path / "operator.log", process=None,
        settings={**towline_operator.settings, "TOWLINE_RECONCILE_MAX_RETRIES": str(MAX_RETRIES)},
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


@pytest.fixture
def jobs_of_poison_refused(towline_installed: ControlPlane, team_namespace: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy refusing Jobs of the run named `poison` in the team namespace."""
    cluster, name = towline_installed, f"refuse-poison-jobs-{team_namespace}"
    apply(cluster, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["jobs"]}]},
                 "validations": [{"expression": "!has(object.metadata.labels) || "
                                                "!('towline.dev/run' in object.metadata.labels) || "
                                                "object.metadata.labels['towline.dev/run'] != 'poison'",
                                  "message": "jobs of run poison are refused by this test", "reason": "Forbidden"}]},
    })
    apply(cluster, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": team_namespace}}}},
    })
    probe = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "probe", "namespace": team_namespace, "labels": {"towline.dev/run": "poison"}},
             "spec": {"template": {"spec": {"restartPolicy": "Never",
                                            "containers": [{"name": "c", "image": "none"}]}}}}

    def refused() -> bool:
        # Under the operator's name (anyone else is refused such a Job by the chart's towline-step-objects policy),
        # with admin's group, which that policy's rule for the operator leaves alone (the probe is no step-shaped Job).
        result = cluster.kubectl("create", "--dry-run=server", "--as", OPERATOR_USER, "--as-group", "system:masters",
                                 "-f", "-", stdin=json.dumps(probe), check=False)
        return result.returncode != 0 and "refused by this test" in result.stderr

    wait_for("the test's admission policy to be enforced", refused, timeout=60)
    yield
    cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, check=False)


def test_a_run_that_always_fails_is_marked_once_and_others_progress(
    small_budget_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
    jobs_of_poison_refused: None,
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "one", "namespace": ns},
                    "spec": {"steps": [{"id": "s0", "action": "data.transform",
                                        "with": {"data": {}, "fields": {"a": "1"}}}]}})
    # The API server refuses every Job of this one run (an admission policy the test installs), so
    # each of its passes fails the same way while the other runs' Jobs are admitted.
    poison = start_run(cluster, ns, "one", "poison")
    healthy = start_run(cluster, ns, "one", "healthy")
    assert wait_for_phase(cluster, ns, healthy, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"

    def marked() -> dict[str, str] | None:
        found = get(cluster, "workflowrun", poison, ns)
        return condition(found, "ReconcileFailing") if found else None

    failing = wait_for("the poison run's ReconcileFailing condition", marked, timeout=120)
    assert failing["status"] == "True"
    assert failing["reason"] == "RetryBudgetExhausted"
    assert f"{MAX_RETRIES + 1} reconcile passes in a row failed" in failing["message"]
    assert "403" in failing["message"] or "Forbidden" in failing["message"], failing["message"]
    assert list_objects(cluster, "jobs", ns, f"towline.dev/run={healthy}"), "the healthy run had its Job"

    # A later change to the run gives it one more pass; it fails again without a second report.
    # (The resume annotation: the one annotation the admission policies let anyone but the operator change.)
    cluster.kubectl("annotate", "workflowrun", poison, "-n", ns, "towline.dev/resume=touched")
    second = start_run(cluster, ns, "one", "after-the-poison")
    assert wait_for_phase(cluster, ns, second, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
    events = warning_events(cluster, ns, poison, "ReconcileFailing")
    assert len(events) == 1, events
    assert events[0].get("count", 1) == 1
    assert marked() == failing, "the condition is written once, not on every pass"
    log = small_budget_operator.log_text()
    assert log.count(f"{poison}: {MAX_RETRIES + 1} passes failed; giving up") == 1, log[-3000:]

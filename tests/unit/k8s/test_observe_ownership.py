"""Only what a run controls counts as its Jobs, pods and Approvals, whatever labels say."""

from __future__ import annotations

import json
from typing import Any

from towline.engine import approval_name, job_name
from towline.k8s.observe import build_observed, decision_time

RUN, UID = "deploy-1", "uid-of-deploy-1"
IMAGE = "ghcr.io/towline/runner:0.1.0"


def owned_by(uid: str, kind: str = "WorkflowRun") -> list[dict[str, Any]]:
    return [{"apiVersion": "towline.dev/v1alpha1", "kind": kind, "name": "x", "uid": uid, "controller": True}]


def approval(*, name: str | None = None, run: str = RUN, step: str = "review", owner: str = UID,
             decision: str | None = "Approved") -> dict[str, Any]:
    spec: dict[str, Any] = {"runName": run, "step": step}
    if decision:
        spec.update(decision=decision, decidedBy="bob")
    return {"metadata": {"name": name or approval_name(run, step), "labels": {"towline.dev/run": RUN},
                         "ownerReferences": owned_by(owner)}, "spec": spec}


def job(*, owner: str = UID, uid: str = "job-uid") -> dict[str, Any]:
    return {"metadata": {"name": job_name(RUN, "deploy", 1), "uid": uid, "ownerReferences": owned_by(owner),
                         "labels": {"towline.dev/attempt": "1"}, "annotations": {"towline.dev/step-id": "deploy"}},
            "spec": {"template": {"spec": {"containers": [{"name": "step", "image": IMAGE}]}}},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}}


def pod(*, owner: str, output: str) -> dict[str, Any]:
    message = json.dumps({"ok": True, "output": output})
    return {"metadata": {"name": f"p-{output}", "labels": {"job-name": job_name(RUN, "deploy", 1)},
                         "ownerReferences": owned_by(owner, "Job")},
            "spec": {"containers": [{"name": "step", "image": IMAGE}]},
            "status": {"containerStatuses": [{"name": "step", "image": IMAGE,
                                              "state": {"terminated": {"exitCode": 0, "message": message}}}]}}


def observe(jobs: list[Any] = (), pods: list[Any] = (), approvals: list[Any] = ()) -> Any:  # type: ignore[assignment]
    return build_observed(list(jobs), list(pods), list(approvals), run_name=RUN, run_uid=UID)


def test_the_runs_own_approval_counts() -> None:
    assert observe(approvals=[approval()]).approvals["review"].decision == "Approved"


def test_another_runs_approval_relabelled_to_this_run_does_not_count() -> None:
    borrowed = approval(name=approval_name("other-run", "review"), run="other-run", owner="uid-of-other-run")
    assert observe(approvals=[borrowed]).approvals == {}


def test_an_approval_with_the_right_name_but_another_owner_does_not_count() -> None:
    assert observe(approvals=[approval(owner="uid-of-a-deleted-run-with-the-same-name")]).approvals == {}


def test_an_approval_naming_another_step_than_its_name_does_not_count() -> None:
    assert observe(approvals=[approval(name=approval_name(RUN, "deploy__approval"))]).approvals == {}


def test_an_approval_naming_another_run_in_its_spec_does_not_count() -> None:
    assert observe(approvals=[approval(run="other-run", name=approval_name(RUN, "review"))]).approvals == {}


def test_a_job_the_run_does_not_control_is_ignored() -> None:
    assert observe(jobs=[job(owner="somebody-else")]).jobs == {}


def test_a_pod_the_jobs_controller_did_not_make_cannot_supply_the_result() -> None:
    observed = observe(jobs=[job()], pods=[pod(owner="job-uid", output="real"), pod(owner="forged", output="fake")])
    assert observed.jobs[("deploy", 1)].result.output == "real"


def test_decision_time_comes_only_from_status_the_operator_wrote() -> None:
    decided = approval()
    claimed = {"time": "2020-01-01T00:00:00Z", "fieldsV1": {"f:spec": {"f:decision": {}}}}
    decided["metadata"]["managedFields"] = [claimed]
    assert decision_time(decided) is None
    decided["status"] = {"decidedAt": "2026-11-30T10:00:00Z"}
    assert decision_time(decided) is not None and decision_time(decided).year == 2026  # type: ignore[union-attr]

"""What the archive takes from a run, an approval and a step pod: what an auditor asks about, not the API server's
bookkeeping; the run's record names its approvers and vouches for its logs by digest."""

from __future__ import annotations

from datetime import UTC, datetime

from towline.archive.capture import (
    approval_capture,
    approval_decided,
    kept_object,
    log_capture,
    pod_containers,
    pod_step,
    run_capture,
    run_deleting,
    run_finished,
)

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def run_body(**status: object) -> dict[str, object]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
        "metadata": {"name": "deploy-1", "namespace": "ops", "uid": "u-run", "resourceVersion": "41",
                     "managedFields": [{"manager": "towline"}], "creationTimestamp": "2026-12-06T11:00:00Z",
                     "labels": {"towline.dev/workflow": "deploy-prod"}, "finalizers": ["towline.dev/archive"],
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "team": "sre"}},
        "spec": {"workflowRef": {"name": "deploy-prod"}, "requestedBy": "carol", "params": {"version": "2.0"}},
        "status": {"phase": "Succeeded", "startedAt": "2026-12-06T11:00:01Z", "finishedAt": "2026-12-06T11:05:00Z",
                   **status},
    }


def approval_body(decided_by: str | None = "bob", phase: str = "Approved") -> dict[str, object]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Approval",
        "metadata": {"name": "deploy-1-review", "namespace": "ops", "uid": "u-appr", "resourceVersion": "9",
                     "ownerReferences": [{"kind": "WorkflowRun", "name": "deploy-1", "uid": "u-run"}]},
        "spec": {"runName": "deploy-1", "step": "review", "decision": "Approved" if decided_by else None,
                 "decidedBy": decided_by, "reason": "change 4711"},
        "status": {"phase": phase},
    }


def test_the_kept_object_drops_bookkeeping_and_the_applied_copy_but_keeps_identity_spec_and_status() -> None:
    kept = kept_object(run_body())
    assert kept["metadata"] == {"name": "deploy-1", "namespace": "ops", "uid": "u-run",
                                "labels": {"towline.dev/workflow": "deploy-prod"}, "annotations": {"team": "sre"},
                                "creationTimestamp": "2026-12-06T11:00:00Z"}
    assert kept["spec"]["requestedBy"] == "carol" and kept["status"]["phase"] == "Succeeded"


def test_the_same_run_read_twice_is_the_same_record() -> None:
    later = run_body()
    later["metadata"]["resourceVersion"] = "99"  # type: ignore[index]
    assert run_capture(run_body(), [], [], NOW).body == run_capture(later, [], [], NOW).body


def test_a_runs_record_indexes_who_asked_who_approved_and_when_and_lists_its_logs_by_digest() -> None:
    logs = [{"key": "u-pod/step", "digest": "d" * 64, "step": "apply", "attempt": 1, "container": "step",
             "truncated": False},
            {"key": "u-pod/prepare", "digest": "e" * 64, "step": "apply", "attempt": 1, "container": "prepare",
             "truncated": False}]
    capture = run_capture(run_body(), [approval_body()], logs, NOW)
    assert (capture.kind, capture.key) == ("run", "u-run")
    index = capture.index
    assert (index.name, index.workflow, index.phase, index.requester) == ("deploy-1", "deploy-prod", "Succeeded",
                                                                          "carol")
    assert index.approvers == ("bob",)
    assert index.started_at == datetime(2026, 12, 6, 11, 0, 1, tzinfo=UTC)
    assert [log["container"] for log in capture.body["logs"]] == ["prepare", "step"], "in a stable order"
    assert capture.body["deletedBeforeItEnded"] is False


def test_a_run_deleted_before_it_ended_says_so() -> None:
    body = run_body(phase="Running", finishedAt=None)
    body["metadata"]["deletionTimestamp"] = "2026-12-06T11:02:00Z"  # type: ignore[index]
    assert run_deleting(body) and not run_finished(body)
    assert run_capture(body, [], [], NOW).body["deletedBeforeItEnded"] is True


def test_an_approval_is_recorded_once_decided_with_its_run_and_decider() -> None:
    assert not approval_decided(approval_body(None, "Pending"))
    assert approval_decided(approval_body()) and approval_decided(approval_body(None, "Expired"))
    capture = approval_capture(approval_body())
    assert (capture.kind, capture.key) == ("approval", "u-appr")
    assert (capture.index.run_uid, capture.index.step, capture.index.decided_by) == ("u-run", "review", "bob")
    assert capture.body["approval"]["spec"]["reason"] == "change 4711"


def pod(notification: str | None = None) -> dict[str, object]:
    labels = {"towline.dev/run": "deploy-1", "towline.dev/step": "load-accounts", "towline.dev/attempt": "2"}
    if notification:
        labels["towline.dev/notification"] = notification
    return {"metadata": {"name": "towline-step-deploy-1-load-accounts-2", "uid": "u-pod", "labels": labels,
                         "annotations": {"towline.dev/step-id": "load_accounts"}},
            "spec": {"initContainers": [{"name": "prepare"}], "containers": [{"name": "step"}]},
            "status": {"phase": "Succeeded"}}


def test_a_pods_containers_and_step_come_from_its_spec_labels_and_annotation() -> None:
    assert pod_containers(pod()) == ["prepare", "step"]
    assert pod_step(pod()) == ("load_accounts", 2), "the step id, not its label form"
    assert pod_step(pod("opened-0")) == ("load_accounts/notification-opened-0", 2)


def test_a_log_past_the_cap_is_cut_at_a_character_and_says_how_much_there_was() -> None:
    capture = log_capture(pod(), "u-run", "step", "é" * 10, cap=5)
    assert capture.key == "u-pod/step"
    assert capture.body["text"] == "éé", "cut at the cap, never inside a character"
    assert capture.body["bytes"] == 20 and capture.body["truncated"] is True
    whole = log_capture(pod(), "u-run", "step", "ok\n", cap=5)
    assert whole.body["text"] == "ok\n" and whole.body["truncated"] is False
    assert (whole.index.run_uid, whole.index.step, whole.index.attempt) == ("u-run", "load_accounts", 2)

"""The pure parts of the live commands: who may decide (the admission policy's own CEL), a run's gate
found from its status, the approvals table, and which pods `logs -f` follows with which prefix."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from towline.engine import job_name
from towline.k8s import reflector
from towline.plugin import approvalrule, approvals, filters, follow
from towline.plugin.approvalrule import User
from towline.plugin.manifests import UsageError

POLICIES = Path(__file__).parents[3] / "charts" / "towline" / "templates" / "admission-policies.yaml"
BOB, CAROL, ALICE = User("bob", ("team-b", "approvers")), User("carol", ("team-a",)), User("alice", ("team-a",))


def chart_decision_rules() -> list[str]:
    """The approval-decisions policy's validations that guard a decision, whitespace as the API server sees it."""
    document = POLICIES.read_text().split("\n---\n")[0]
    assert "-approval-decisions" in document
    validations = yaml.safe_load(document[document.index("  validations:"):])["validations"]
    return [" ".join(v["expression"].split()) for v in validations if "variables.deciding" in v["expression"]]


def test_the_plugin_evaluates_exactly_the_chart_policys_decision_rules() -> None:
    chart = chart_decision_rules()
    assert len(chart) == 6
    assert [" ".join(rule.split()) for rule in approvalrule.DECISION_RULES] == chart


def approval(*, users: tuple[str, ...] = (), groups: tuple[str, ...] = (), four_eyes: bool = False,
             requested_by: str = "carol", phase: str | None = "Pending", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": "release-1-review", "namespace": "team", "creationTimestamp": "2026-12-02T10:00:00Z"},
        "spec": {"runName": "release-1", "workflowName": "release", "step": "review", "message": "Release 2.0?",
                 "approvers": {**({"users": list(users)} if users else {}),
                               **({"groups": list(groups)} if groups else {})},
                 "fourEyes": four_eyes, "requestedBy": requested_by, "expiresAt": "2026-12-02T10:10:00Z", **spec},
    }
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


@pytest.mark.parametrize(("gate", "expected"), [
    (approval(users=("bob", "carol"), four_eyes=True), {"bob"}),
    (approval(groups=("team-a",)), {"carol", "alice"}),
    (approval(groups=("approvers",), users=("alice",)), {"bob", "alice"}),
    (approval(groups=("team-a",), four_eyes=True, earlierRequesters=["alice"]), set()),
    (approval(groups=("team-a",), four_eyes=True, requested_by="bob", earlierRequesters=["alice"]), {"carol"}),
    (approval(groups=("team-a",), four_eyes=False, earlierRequesters=["alice"]), {"carol", "alice"}),
    (approval(users=("bob",), phase="Expired"), set()),
    (approval(users=("bob",), phase=None), {"bob"}),
    (approval(users=("bob",), decision="Approved", decidedBy="bob"), set()),
    (approval(), set()),
])
def test_may_decide_follows_the_policy(gate: dict[str, Any], expected: set[str]) -> None:
    assert {user.name for user in (BOB, CAROL, ALICE) if approvalrule.may_decide(gate, user)} == expected


def test_a_rule_that_cannot_be_evaluated_refuses_as_the_servers_failure_policy_does() -> None:
    gate = approval(users=("bob",), requested_by="bob")
    del gate["spec"]["fourEyes"]  # the CRD defaults it; without it, CEL has no answer where the requester decides
    assert not approvalrule.may_decide(gate, BOB)
    gate["spec"]["requestedBy"] = "carol"  # `error || true` is true in CEL, on the server as here
    assert approvalrule.may_decide(gate, BOB)


def test_the_approvals_table_shows_run_step_approvers_age_expiry_and_message() -> None:
    now = datetime(2026, 12, 2, 10, 5, 30, tzinfo=UTC)
    gate = approval(users=("bob",), groups=("approvers",), four_eyes=True, message="Release " + "x" * 80)
    lines = approvals.approvals_table([gate], now, all_namespaces=False).splitlines()
    assert lines[0].split() == ["NAME", "RUN", "STEP", "APPROVERS", "AGE", "EXPIRES", "MESSAGE"]
    row = r"release-1-review +release-1 +review +bob,group:approvers \(four eyes\) +5m +in 4m +Release x+\.\.\.$"
    assert re.match(row, lines[1]), lines[1]
    late = approvals.approvals_table([gate], datetime(2026, 12, 2, 11, tzinfo=UTC), all_namespaces=True)
    assert late.splitlines()[0].startswith("NAMESPACE") and late.splitlines()[1].startswith("team")
    assert " expired " in late
    assert approvals.approvals_table([], now, all_namespaces=False) == "No pending approvals."
    assert [approvals.pending(a) for a in (gate, approval(phase="Approved"), approval(decision="Approved"))] == [
        True, False, False]


def test_approvals_wide_names_the_workflow_and_requester_and_keeps_the_whole_message() -> None:
    now = datetime(2026, 12, 2, 10, 5, 30, tzinfo=UTC)
    gate = approval(users=("bob",), message="Release " + "x" * 80)
    lines = approvals.approvals_table([gate], now, all_namespaces=False, wide=True).splitlines()
    assert lines[0].split() == ["NAME", "RUN", "STEP", "WORKFLOW", "REQUESTED", "BY", "APPROVERS", "AGE", "EXPIRES",
                                "MESSAGE"]
    assert re.match(r"release-1-review +release-1 +review +release +carol +bob +5m +in 4m +Release x{80}$", lines[1])


def test_approvals_are_narrowed_by_their_runs_workflow_age_and_count_like_runs() -> None:
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    older = approval(workflowName="nightly")
    newer = approval(workflowName="release")
    newer["metadata"] = {**newer["metadata"], "name": "release-2-review", "creationTimestamp": "2026-12-02T11:30:00Z"}
    both = [newer, older]
    assert [a["metadata"]["name"] for a in filters.RunFilter().apply(both, now)] == [
        "release-1-review", "release-2-review"], "oldest first"
    assert [a["metadata"]["name"] for a in filters.RunFilter(workflow="nightly").apply(both, now)] == [
        "release-1-review"]
    assert [a["metadata"]["name"] for a in filters.RunFilter(since=timedelta(hours=1)).apply(both, now)] == [
        "release-2-review"]
    assert [a["metadata"]["name"] for a in filters.RunFilter(last=1).apply(both, now)] == ["release-2-review"]


def run_with(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "release-1"}, "status": {"phase": "AwaitingApproval", "steps": list(entries)}}


def test_a_runs_gate_is_found_from_its_status_by_the_gate_or_the_gated_step() -> None:
    run = run_with({"id": "check", "phase": "Succeeded"},
                   {"id": "review", "phase": "Running", "approvalName": "release-1-review"},
                   {"id": "approve_deploy", "gateFor": "deploy", "phase": "Running",
                    "approvalName": "release-1-approve-deploy"})
    assert approvals.approval_of_step(run, "review") == "release-1-review"
    assert approvals.approval_of_step(run, "deploy") == "release-1-approve-deploy"
    assert approvals.approval_of_step(run, "approve_deploy") == "release-1-approve-deploy"
    assert [e["id"] for e in approvals.pending_of_run(run)] == ["review", "approve_deploy"]
    with pytest.raises(UsageError, match="step check of run release-1 is not an approval \\(Succeeded\\); "
                                         "its approval steps: review, approve_deploy"):
        approvals.approval_of_step(run, "check")
    with pytest.raises(UsageError, match="run release-1 has no step 'nope'"):
        approvals.approval_of_step(run, "nope")


def test_a_gate_not_reached_or_already_decided_says_its_phase() -> None:
    waiting = run_with({"id": "review", "phase": "Pending", "approvalName": "release-1-review"})
    with pytest.raises(UsageError, match="has no pending approval: it is Pending \\(the run has not reached it\\)"):
        approvals.approval_of_step(waiting, "review")
    done = run_with({"id": "review", "phase": "Succeeded", "approvalName": "release-1-review",
                     "decidedBy": "bob", "reason": "Approved"})
    with pytest.raises(UsageError, match="it is Succeeded, approved by bob"):
        approvals.approval_of_step(done, "review")


def test_two_gates_for_one_name_are_ambiguous() -> None:
    run = run_with({"id": "deploy", "phase": "Running", "approvalName": "a"},
                   {"id": "approve_deploy", "gateFor": "deploy", "phase": "Running", "approvalName": "b"})
    with pytest.raises(UsageError, match="ambiguous: gates deploy, approve_deploy"):
        approvals.approval_of_step(run, "deploy")


def pod(name: str, job: str, phase: str, created: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created, "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-{job}", "controller": True}]},
        "status": {"phase": phase}}


def test_logs_follow_only_started_pods_of_jobs_the_run_names_prefixed_with_step_and_attempt() -> None:
    run_name = "release-1"
    first, retried, second = (job_name(run_name, "fetch", 1), job_name(run_name, "fetch", 2),
                              job_name(run_name, "push", 1))
    run = run_with({"id": "fetch", "jobName": retried, "attempt": 2, "history": [{"attempt": 1, "jobName": first}]},
                   {"id": "push", "jobName": second, "attempt": 1})
    assert follow.step_jobs(run) == {first: ("fetch", 1), retried: ("fetch", 2), second: ("push", 1)}
    pods = {p["metadata"]["name"]: p for p in (
        pod("p2", retried, "Running", "2026-12-02T10:00:02Z"),
        pod("p1", first, "Failed", "2026-12-02T10:00:01Z"),
        pod("p3", second, "Pending", "2026-12-02T10:00:03Z"),
        pod("forged", "someone-elses-job", "Running", "2026-12-02T10:00:00Z"),
    )}
    assert [(p["metadata"]["name"], label) for p, label in follow.loggable(run, pods, set())] == [
        ("p1", "fetch: "), ("p2", "fetch (attempt 2): ")]
    assert follow.loggable(run, pods, {"p1", "p2"}) == []
    pods["p3"]["status"]["phase"] = "Succeeded"
    assert [label for _, label in follow.loggable(run, pods, {"p1", "p2"})] == ["push: "]


def test_watch_prints_phase_and_current_step() -> None:
    assert follow.change_line("r", {"status": {"phase": "Running", "currentStep": "push"}}) == (
        ("Running", "push"), "r: Running (push)")
    assert follow.change_line("r", {}) == (("Pending", ""), "r: Pending")


class _Chunks:
    """An HTTP body that arrives in arbitrary pieces, as aiohttp hands them over."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks, self.released = chunks, False
        self.content = self

    async def iter_any(self) -> Any:
        for chunk in self.chunks:
            yield chunk

    def release(self) -> None:
        self.released = True


def test_stream_lines_are_split_at_newlines_across_chunks_without_a_length_limit() -> None:
    big = b"x" * 300_000  # a watch event far beyond a line reader's 64 KiB
    body = _Chunks(b'{"a":', b'1}\n' + big[:100], big[100:] + b"\n\nlast")

    async def collect() -> list[bytes]:
        return [line async for line in reflector.lines(body)]

    assert asyncio.run(collect()) == [b'{"a":1}', big, b"", b"last"]
    assert body.released

"""Subflow steps: start a child run, end with its phase, output its outputs; cancel, suspend and depth."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine_harness import WORKFLOW_UID, Sim, action, workflow

from towline.api.run import WorkflowRun, WorkflowRunSpec, WorkflowRunStatus
from towline.api.subflows import MAX_SUBFLOW_DEPTH, SubflowRecord
from towline.engine import start_run
from towline.engine.actions import Action, CreateApproval, CreateChildRun, CreateStepJob, SetChildRun
from towline.engine.observed import ApprovalObservation, ChildRunObservation, JobObservation, Observed
from towline.engine.subflows import child_run_errors

CHANGE = SubflowRecord(uid="uid-change", generation=3)


def call(step_id: str, *needs: str, **params: Any) -> dict[str, Any]:
    return {"id": step_id, "needs": list(needs), "workflow": {"name": "change-approval", "params": params}}


@dataclass
class SubflowSim(Sim):
    """A Sim whose run may be a child itself (`chain`) and whose children are observed as the test says."""

    chain: list[str] = field(default_factory=list)
    children: dict[str, ChildRunObservation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.resume_token = None
        self.jobs = dict[tuple[str, int], JobObservation]()
        self.approvals = dict[str, ApprovalObservation]()
        self.created = list[CreateStepJob]()
        self.requested = list[CreateApproval]()
        self.actions = list[Action]()
        self.last = None
        wire: dict[str, Any] = {"workflowRef": {"name": "renewal-watch"}, "params": self.params,
                                "requestedBy": self.requested_by}
        if self.chain:
            wire["trigger"] = {"type": "parent", "parent": {"run": "up", "uid": "uid-up", "step": "s",
                                                            "chain": self.chain}}
        self.run_spec = WorkflowRunSpec.model_validate(wire)
        started = start_run(self.spec, 1, self.run_spec, workflow_uid=WORKFLOW_UID,
                            subflows={"change-approval": CHANGE})
        assert not isinstance(started, list), started
        self.status = WorkflowRunStatus(workflow_spec=started[0], params=started[1])

    def observed(self) -> Observed:
        return Observed(jobs=dict(self.jobs), approvals=dict(self.approvals), child_runs=dict(self.children))

    def child(self, step_id: str, phase: str, **extra: Any) -> None:
        name = self.step(step_id).child_run
        assert name is not None
        self.children[step_id] = ChildRunObservation(step_id=step_id, name=name, phase=phase, **extra)


def test_a_subflow_step_starts_its_child_run_as_the_parents_requester_with_bound_params() -> None:
    sim = SubflowSim(workflow([action("build"), call("change", "build", version="${{ steps.build.output.v }}")]))
    sim.reconcile()
    sim.finish("build", output={"v": "1.2"})
    sim.reconcile()
    [created] = sim.of_type(CreateChildRun)
    assert (created.workflow, created.requested_by, created.params) == ("change-approval", "alice", {"version": "1.2"})
    assert created.chain == ("renewal-watch",) and created.workflow_uid == "uid-change"
    assert sim.step("change").child_run == created.name == "renewal-watch-1-change"
    assert sim.last is not None and sim.last.wake_at == sim.now  # the next pass reads what took the child's name
    assert sim.phase_of("change") == "Running" and sim.phase == "Running"
    assert sim.status.workflow_spec is not None and sim.status.workflow_spec.subflows == {"change-approval": CHANGE}


def test_the_step_ends_with_the_childs_phase_and_its_output_is_the_childs_outputs() -> None:
    sim = SubflowSim(workflow([call("change")]))
    sim.reconcile()
    sim.child("change", "AwaitingApproval")
    sim.reconcile()
    assert sim.phase_of("change") == "Running"
    sim.child("change", "Succeeded", outputs={"ticket": "CHG-7"})
    sim.reconcile()
    assert sim.phase_of("change") == "Succeeded"
    assert sim.step("change").output == {"ticket": "CHG-7"}
    assert sim.phase == "Succeeded"


def test_a_failed_child_fails_the_step_with_its_message() -> None:
    sim = SubflowSim(workflow([call("change")]))
    sim.reconcile()
    sim.child("change", "Failed", message="the change manager rejected it")
    sim.reconcile()
    assert sim.phase_of("change") == "Failed" and sim.step("change").reason == "ChildRunFailed"
    assert "the change manager rejected it" in (sim.step("change").message or "")
    assert sim.phase == "Failed"


def test_a_run_under_the_childs_name_that_is_not_its_child_never_counts() -> None:
    sim = SubflowSim(workflow([call("change")]))
    sim.reconcile()
    sim.child("change", "", foreign="its spec.trigger does not name this run and step as its parent")
    sim.reconcile()
    assert sim.phase_of("change") == "Failed" and sim.step("change").reason == "ChildRunForeign"
    assert sim.step("change").output is None


def test_cancelling_the_parent_cancels_the_child() -> None:
    sim = SubflowSim(workflow([call("change")]))
    sim.reconcile()
    sim.child("change", "Running")
    sim.set_spec(cancel=True)
    sim.reconcile()
    assert SetChildRun(sim.step("change").child_run or "", cancel=True) in sim.of_type(SetChildRun)
    assert sim.phase_of("change") == "Cancelled"


def test_suspending_and_resuming_the_parent_reach_the_child() -> None:
    sim = SubflowSim(workflow([call("change")]))
    sim.reconcile()
    sim.child("change", "Running")
    sim.set_spec(suspend=True)
    sim.reconcile()
    assert sim.of_type(SetChildRun)[-1].suspend is True
    sim.child("change", "Running", suspend=True)
    sim.set_spec(suspend=False)
    sim.reconcile()
    assert sim.of_type(SetChildRun)[-1].suspend is False


def test_a_step_past_the_depth_limit_fails_naming_the_chain_and_starts_no_child() -> None:
    chain = [f"w{level}" for level in range(MAX_SUBFLOW_DEPTH)]
    sim = SubflowSim(workflow([call("change")]), chain=chain)
    sim.reconcile()
    assert not sim.of_type(CreateChildRun)
    entry = sim.step("change")
    assert entry.phase == "Failed" and entry.reason == "SubflowTooDeep"
    assert f"subflows nest at most {MAX_SUBFLOW_DEPTH} deep" in (entry.message or "")
    assert "w0 -> w1 -> w2 -> w3 -> w4 -> renewal-watch -> change-approval" in (entry.message or "")


def test_a_step_just_within_the_depth_limit_starts_its_child() -> None:
    sim = SubflowSim(workflow([call("change")]), chain=[f"w{level}" for level in range(MAX_SUBFLOW_DEPTH - 1)])
    sim.reconcile()
    [created] = sim.of_type(CreateChildRun)
    assert len(created.chain) == MAX_SUBFLOW_DEPTH


def test_a_run_cannot_start_when_a_subflow_workflow_is_missing_or_not_allowed() -> None:
    spec = workflow([call("change")])
    run_spec = WorkflowRunSpec.model_validate({"workflowRef": {"name": "renewal-watch"}})
    problems = start_run(spec, 1, run_spec, subflows={"change-approval": "does not allow runs as a subflow: set "
                                                      "spec.subflow.allowed: true in it"})
    assert isinstance(problems, list)
    assert problems == ["step change: workflow.name: Workflow 'change-approval' does not allow runs as a subflow: "
                        "set spec.subflow.allowed: true in it"]
    assert start_run(spec, 1, run_spec) == [
        "step change: workflow.name: Workflow 'change-approval' does not exist in this namespace"]


def parent_run(**status_extra: Any) -> WorkflowRun:
    spec = workflow([call("change")])
    started = start_run(spec, 1, WorkflowRunSpec.model_validate({"workflowRef": {"name": "release"}}),
                        subflows={"change-approval": CHANGE})
    assert not isinstance(started, list)
    return WorkflowRun.model_validate({
        "metadata": {"name": "release-1", "uid": "uid-parent"},
        "spec": {"workflowRef": {"name": "release"}, "requestedBy": "carol"},
        "status": {"workflowSpec": started[0].to_wire(), **status_extra},
    })


def child_spec(**changes: Any) -> WorkflowRunSpec:
    wire: dict[str, Any] = {"workflowRef": {"name": "change-approval"}, "requestedBy": "carol",
                            "trigger": {"type": "parent", "parent": {"run": "release-1", "uid": "uid-parent",
                                                                     "step": "change", "chain": ["release"],
                                                                     "workflowUid": "uid-change"}}}
    wire.update(changes)
    return WorkflowRunSpec.model_validate(wire)


def test_the_child_its_parents_step_started_may_start() -> None:
    assert child_run_errors(child_spec(), "uid-parent", parent_run(), "uid-change", True) == []


def test_a_child_with_another_requester_than_its_parent_is_refused() -> None:
    [problem] = child_run_errors(child_spec(requestedBy="bob"), "uid-parent", parent_run(), "uid-change", True)
    assert problem.startswith("spec.requestedBy: 'bob' is not the parent run's requester 'carol'")


def test_a_child_not_controlled_by_its_parent_or_of_another_workflow_is_refused() -> None:
    problems = child_run_errors(child_spec(workflowRef={"name": "other"}), None, parent_run(), "uid-change", True)
    assert [p.split(":")[0] for p in problems] == ["metadata.ownerReferences", "spec.trigger.parent.step"]


def test_a_child_whose_parent_is_gone_or_another_run_is_refused() -> None:
    assert child_run_errors(child_spec(), "uid-parent", None, "uid-change", True)[0].startswith(
        "spec.trigger.parent.run: run 'release-1' (uid uid-parent) does not exist")


def test_a_child_of_a_workflow_replaced_or_no_longer_allowed_is_refused() -> None:
    problems = child_run_errors(child_spec(), "uid-parent", parent_run(), "uid-new", False)
    assert [p.split(":")[0] for p in problems] == ["spec.workflowRef", "spec.workflowRef"]
    assert "deleted and created again" in problems[0] and "spec.subflow.allowed: true" in problems[1]

"""Subflow steps: start a child run, end with its phase, output its outputs; cancel, suspend and depth."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine_harness import WORKFLOW_UID, Sim, action, workflow

from towline.api.run import RetryOf, WorkflowRun, WorkflowRunSpec, WorkflowRunStatus
from towline.api.subflows import MAX_SUBFLOW_DEPTH, ChildRetry, SubflowRecord
from towline.engine import start_run
from towline.engine.actions import Action, CreateApproval, CreateChildRun, CreateStepJob, SetChildRun
from towline.engine.observed import ApprovalObservation, ChildRunObservation, JobObservation, Observed
from towline.engine.rerun import child_retry, earlier_requesters, params_digest, start_retry
from towline.engine.subflows import child_run_errors
from towline.k8s.objects import RunRef
from towline.k8s.subflows import build_child_run

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
        self.web_view_url = None
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


def retried(sim: SubflowSim, params: dict[str, Any]) -> SubflowSim:
    """The sim's run as a retry whose run retried had a child for step change that failed after `open`."""
    sim.status.retried_children = {"change": ChildRetry(run="release-0-change", uid="uid-old-child", reuse=["open"],
                                                        params_digest=params_digest(params))}
    return sim


def test_a_retried_parents_step_retries_the_child_that_failed_reusing_its_succeeded_steps() -> None:
    sim = retried(SubflowSim(workflow([call("change", version="1.2")])), {"version": "1.2"})
    sim.reconcile()
    [created] = sim.of_type(CreateChildRun)
    assert created.retry_of == RetryOf(run="release-0-change", reuse=["open"])
    assert created.params == {"version": "1.2"} and created.requested_by == "alice"
    [started] = sim.events("SubflowStarted")
    assert started.message.endswith("a retry of child run release-0-change reusing open")
    assert build_child_run(RunRef(name="r", namespace="ns", uid="u", workflow="w"), created)["spec"]["retryOf"] == {
        "run": "release-0-change", "reuse": ["open"]}


def test_a_retried_parents_step_passing_other_params_starts_its_child_from_the_start_saying_so() -> None:
    sim = retried(SubflowSim(workflow([call("change", version="1.3")])), {"version": "1.2"})
    sim.reconcile()
    [created] = sim.of_type(CreateChildRun)
    assert created.retry_of is None
    assert "spec" in build_child_run(RunRef(name="r", namespace="ns", uid="u", workflow="w"), created)
    [fresh] = sim.events("SubflowNotRetried")
    assert "not as a retry of child run release-0-change: the params it passes differ" in fresh.message


def test_a_step_of_a_run_that_is_no_retry_starts_its_child_from_the_start() -> None:
    sim = SubflowSim(workflow([call("change")]))
    sim.reconcile()
    [created] = sim.of_type(CreateChildRun)
    assert created.retry_of is None


def finished_child(phase: str, **status: Any) -> WorkflowRun:
    spec = workflow([action("open"), action("apply", "open"), action("close", "apply")])
    started = start_run(spec, 1, WorkflowRunSpec.model_validate({"workflowRef": {"name": "change-approval"}}),
                        workflow_uid=WORKFLOW_UID)
    assert not isinstance(started, list)
    return WorkflowRun.model_validate({
        "metadata": {"name": "release-0-change", "uid": "uid-old-child"},
        "spec": {"workflowRef": {"name": "change-approval"}, "params": {"version": "1.2"}},
        "status": {"phase": phase, "workflowSpec": started[0].to_wire(),
                   "steps": [{"id": "open", "phase": "Succeeded"}, {"id": "apply", "phase": "Failed"}], **status},
    })


def test_a_failed_or_cancelled_child_is_retried_reusing_its_succeeded_steps_others_are_not() -> None:
    for phase in ("Failed", "Cancelled"):
        assert child_retry(finished_child(phase)) == ChildRetry(run="release-0-change", uid="uid-old-child",
                                                                reuse=["open"],
                                                                params_digest=params_digest({"version": "1.2"}))
    assert child_retry(finished_child("Succeeded")) is None
    never_started = finished_child("Failed").model_copy(update={"status": WorkflowRunStatus(phase="Failed")})
    assert child_retry(never_started) is None


RETRY_RECORD = {"change": {"run": "release-0-change", "uid": "uid-old-child", "reuse": ["open"],
                           "paramsDigest": params_digest({})}}


def test_a_child_retrying_the_earlier_child_its_parent_recorded_may_start() -> None:
    spec = child_spec(retryOf={"run": "release-0-change", "reuse": ["open"]})
    parent = parent_run(retriedChildren=RETRY_RECORD)
    assert child_run_errors(spec, "uid-parent", parent, "uid-change", True, retried_uid="uid-old-child") == []


def test_a_child_retrying_another_run_than_its_parent_recorded_is_refused() -> None:
    parent = parent_run(retriedChildren=RETRY_RECORD)
    cases = [
        (child_spec(retryOf={"run": "bobs-own-run", "reuse": ["open"]}), "uid-bobs"),  # another run
        (child_spec(retryOf={"run": "release-0-change", "reuse": ["open"]}), "uid-squatter"),  # created again
        (child_spec(retryOf={"run": "release-0-change", "reuse": ["open", "apply"]}), "uid-old-child"),  # more reuse
    ]
    for spec, uid in cases:
        [problem] = child_run_errors(spec, "uid-parent", parent, "uid-change", True, retried_uid=uid)
        assert problem.startswith("spec.retryOf: run ") and "is not the earlier child the parent run 'release-1' " \
            "retries for step 'change'" in problem, problem
    spec = child_spec(retryOf={"run": "release-0-change", "reuse": ["open"]})
    [problem] = child_run_errors(spec, "uid-parent", parent_run(), "uid-change", True, retried_uid="uid-old-child")
    assert problem.startswith("spec.retryOf: "), "a parent that records no retried child has none to retry"


def test_a_child_retry_carries_its_parents_params_only_when_they_are_the_earlier_childs() -> None:
    old = finished_child("Failed")
    assert old.status is not None
    for params, refused in (({"version": "1.2"}, False), ({"version": "6.6.6"}, True)):
        spec = child_spec(params=params, retryOf={"run": "release-0-change", "reuse": ["open"]})
        started = start_retry(spec, "change-approval", old.status, 1, workflow_uid=WORKFLOW_UID,
                              previous_params=old.spec.params)
        assert isinstance(started, list) == refused, started
    same = child_spec(params={"version": "1.2"}, retryOf={"run": "release-0-change", "reuse": ["open"]})
    assert start_retry(same, "change-approval", old.status, 2, workflow_uid=WORKFLOW_UID,
                       previous_params=old.spec.params) == [
        "spec.retryOf.run: workflow 'change-approval' changed since run 'release-0-change' (generation 1, now 2); a "
        "retry runs only what that run ran: start a new run instead"], "a changed child Workflow: as a plain retry"
    manual = WorkflowRunSpec.model_validate({"workflowRef": {"name": "change-approval"}, "params": {"version": "1.2"},
                                             "retryOf": {"run": "release-0-change"}})
    assert start_retry(manual, "change-approval", old.status, 1, workflow_uid=WORKFLOW_UID,
                       previous_params=old.spec.params) == [
        "spec.params: a retry runs with the params of the run it retries; remove spec.params"]


def test_a_child_retry_refuses_whom_the_parent_and_the_earlier_child_refuse_under_four_eyes() -> None:
    old = finished_child("Failed", earlierRequesters=["dave"])
    assert old.status is not None
    assert earlier_requesters("carol", old.status, also=["erin", "carol"]) == ["erin", "carol", "dave"]

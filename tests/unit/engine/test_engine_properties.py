"""Properties over random DAGs, outcomes and crash points.

- every run terminates;
- no step starts before its `needs` are satisfied (and finally steps only after the DAG);
- no step attempt is ever created twice, and attempts of a step are numbered 1, 2, 3... (after a
  crash, an attempt that left no trace at all, neither in status nor as a Job, is created again
  under the same number, Job name and idempotency key: never as a new attempt);
- replaying `decide` from the last persisted status plus what the world shows, after a
  crash at any point (actions applied, or only some of them, and status not written),
  ends in the same final state as an uninterrupted run;
- the final state does not depend on the order in which Job results arrive;
- a pass is a fixed point: deciding again at once, on the status it wrote and the world its actions
  made, changes nothing and does nothing, unless the pass asked for that pass itself (`wake_at` now).
  The operator relies on it: the echo of its own status write wakes no pass (runtime/operator.py);
- a Job whose pod can never start (it waits for a missing Secret) is gone before the attempt
  that replaces it is created and when the run ends, so its pod can never start beside another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from engine_harness import T0, FakeCatalog
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from towline.api.run import StepStatus, WorkflowRunSpec, WorkflowRunStatus
from towline.api.workflow import WorkflowSpec
from towline.engine import (
    TERMINAL_RUN_PHASES,
    Action,
    ApprovalObservation,
    CreateApproval,
    CreateStepJob,
    DeleteJob,
    JobObservation,
    Observed,
    RunView,
    StepResult,
    decide,
    gate_id,
    start_run,
)
from towline.engine.observed import REASON_UNMOUNTABLE

MAX_PASSES = 400
FAILURES = (
    "transient", "permanent", "rate_limit", "timeout", "auth", "unknown_side_effect", "validation", "vanish",
    "secret_missing",
)
PROPERTY_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Plan:
    """A workflow and everything the world will do: results per attempt, approval decisions."""

    spec: WorkflowSpec
    outcomes: dict[str, list[str]]
    """Per step id, the outcome of attempt 1, 2, ...; attempts past the list succeed."""
    decisions: dict[str, str | None]
    """Per approval step id (policy gates: per gated step id): Approved, Rejected or None (let it expire)."""


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    size = draw(st.integers(min_value=5, max_value=30))
    compensations = [f"undo_{i}" for i in range(draw(st.integers(0, 2)))]
    steps: list[dict[str, Any]] = []
    for index in range(size):
        step_id = f"s{index}"
        earlier = [s["id"] for s in steps]
        needs = sorted(set(draw(st.lists(st.sampled_from(earlier), max_size=3)))) if earlier else []
        kind = draw(st.sampled_from(["action"] * 8 + ["approval", "wait"]))
        step: dict[str, Any] = {"id": step_id, "needs": needs}
        if kind == "approval":
            step["approval"] = {"message": f"ok {step_id}?", "expiresAfter": "1h"}
        elif kind == "wait":
            step["wait"] = {"duration": draw(st.sampled_from(["0s", "5s", "2m"]))}
        else:
            step["action"] = draw(st.sampled_from(["http.request", "crm.update"]))
            if draw(st.booleans()):
                step["retry"] = {
                    "limit": draw(st.integers(0, 3)), "backoff": draw(st.sampled_from(["fixed", "exponential"])),
                    "baseDelaySeconds": draw(st.integers(0, 5)), "maxDelaySeconds": 30,
                }
            if needs and draw(st.integers(0, 4)) == 0:
                step["with"] = {"seen": f"${{{{ steps.{needs[0]}.phase }}}}"}
        when = draw(st.sampled_from([None] * 6 + ["true", "false", "params.flag"]))
        if when:
            step["when"] = when
        step["runIfSkipped"] = draw(st.integers(0, 5)) == 0
        step["onFailure"] = draw(st.sampled_from(["fail", "fail", "continue", *compensations]))
        steps.append(step)
    finally_steps = []
    for index in range(draw(st.integers(0, 3))):
        earlier = [s["id"] for s in finally_steps]
        needs = sorted(set(draw(st.lists(st.sampled_from(earlier), max_size=2)))) if earlier else []
        finally_steps.append({"id": f"f{index}", "action": "http.request", "needs": needs,
                              "onFailure": draw(st.sampled_from(["fail", "continue"]))})
    spec = WorkflowSpec.model_validate({
        "params": [{"name": "flag", "type": "boolean", "default": draw(st.booleans())}],
        "steps": steps,
        "finally": finally_steps,
        "compensations": [{"id": c, "action": "http.request"} for c in compensations],
        "policy": {
            "parallelism": draw(st.integers(1, 5)),
            "approval": {"requireForMutatingActions": draw(st.booleans()), "expiresAfter": "1h"},
        },
    })
    all_ids = [s["id"] for s in steps] + [s["id"] for s in finally_steps] + compensations
    outcome = st.sampled_from(["ok"] * 6 + list(FAILURES))
    outcomes = {sid: draw(st.lists(outcome, max_size=4)) for sid in all_ids}
    decisions = {s["id"]: draw(st.sampled_from(["Approved", "Approved", "Rejected", None])) for s in steps}
    return Plan(spec, outcomes, decisions)


@dataclass
class World:
    """Jobs and Approvals as the API server holds them, plus the person who repairs credentials."""

    plan: Plan
    now: datetime = T0
    jobs: dict[tuple[str, int], JobObservation] = field(default_factory=dict)
    approvals: dict[str, ApprovalObservation] = field(default_factory=dict)
    created: list[tuple[str, int]] = field(default_factory=list)
    resume_token: str | None = None
    pace: list[bool] = field(default_factory=list)
    """Which active Jobs finish on each tick, in turn (empty: all of them); the first always does."""

    def observed(self) -> Observed:
        return Observed(jobs=dict(self.jobs), approvals=dict(self.approvals))

    def apply(self, action: Action) -> None:
        if isinstance(action, CreateStepJob):
            key = (action.step_id, action.attempt)
            assert key not in self.jobs, f"attempt {key} created twice"
            assert not any(job.credentials_missing for (step, _), job in self.jobs.items() if step == action.step_id), (
                f"attempt {key} created while an earlier attempt's pod still waits for its Secret"
            )
            self.created.append(key)
            self.jobs[key] = JobObservation(action.step_id, action.attempt, action.job_name, "active",
                                            started_at=self.now)
        elif isinstance(action, CreateApproval):
            assert action.step_id not in self.approvals, f"approval {action.step_id} requested twice"
            self.approvals[action.step_id] = ApprovalObservation(action.step_id, action.name,
                                                                 expires_at=action.expires_at)
        elif isinstance(action, DeleteJob):
            self.jobs = {k: j for k, j in self.jobs.items() if j.job_name != action.job_name}

    def tick(self, status: WorkflowRunStatus, wake_at: datetime | None) -> None:
        """Every active Job finishes with its planned outcome; approvals get their planned decision."""
        busy = False
        for key, job in sorted(self.jobs.items()):
            if job.state == "active" and (not busy or self._next_finishes()):
                busy = True
                self._finish(key, job)
        for step_id, approval in list(self.approvals.items()):
            decision = self.plan.decisions.get(step_id.removesuffix("__approval"))
            if approval.decision is None and decision is not None:
                busy = True
                self.approvals[step_id] = replace(approval, decision=decision, decided_by="bob",
                                                  decided_at=self.now)
        if any(c.type == "CredentialsNeedRepair" and c.status == "True" for c in status.conditions):
            self.resume_token = str(int(self.resume_token or "0") + 1)
            busy = True
        step = timedelta(seconds=1)
        self.now = self.now + step if busy or wake_at is None else max(self.now + step, wake_at)

    def _next_finishes(self) -> bool:
        if not self.pace:
            return True
        self.pace.append(self.pace.pop(0))
        return self.pace[-1]

    def _finish(self, key: tuple[str, int], job: JobObservation) -> None:
        planned = self.plan.outcomes.get(key[0], [])
        outcome = planned[key[1] - 1] if key[1] <= len(planned) else "ok"
        if outcome == "vanish":
            del self.jobs[key]
            return
        if outcome == "secret_missing":
            # The Job stays active, its pod waiting; the operator reports the attempt failed.
            result = StepResult(ok=False, error_class="auth", message="Secret 'crm' does not exist", retryable=False)
            self.jobs[key] = replace(job, state="failed", result=result, reason=REASON_UNMOUNTABLE)
            return
        if outcome == "ok":
            result = StepResult(ok=True, output={"step": key[0], "attempt": key[1]})
        else:
            retry_after = 3.0 if outcome == "rate_limit" else None
            result = StepResult(ok=False, error_class=outcome, message=f"{outcome} failure",
                                retry_after_seconds=retry_after)
        self.jobs[key] = replace(job, state="succeeded" if result.ok else "failed", result=result,
                                 finished_at=self.now)


def initial_status(plan: Plan) -> tuple[WorkflowRunStatus, WorkflowRunSpec]:
    spec = WorkflowRunSpec.model_validate({"workflowRef": {"name": "wf"}, "requestedBy": "alice"})
    started = start_run(plan.spec, 1, spec)
    assert not isinstance(started, list), started
    return WorkflowRunStatus(workflow_spec=started[0], params=started[1]), spec


def simulate(
    plan: Plan, crashes: dict[int, int | None], pace: list[bool] | None = None,
) -> tuple[WorkflowRunStatus, World]:
    """Drive a run to its end. `crashes[pass] = n`: only the first n actions applied (None: all), status not written."""
    status, spec = initial_status(plan)
    world = World(plan, pace=list(pace or []))
    catalog = FakeCatalog()
    for index in range(MAX_PASSES):
        view = RunView("run", "ns", "uid-1", "wf", spec, status, resume_token=world.resume_token)
        decision = decide(view, world.observed(), world.now, catalog)
        check_starts(plan, decision.status, decision.actions, world, crashed=any(p < index for p in crashes))
        limit = crashes.get(index)
        applied = decision.actions if limit is None else decision.actions[:limit]
        for action in applied:
            world.apply(action)
        if index not in crashes:
            status = decision.status
        if status.phase in TERMINAL_RUN_PHASES:
            assert not any(job.credentials_missing for job in world.jobs.values()), "a stuck Job outlived the run"
            return status, world
        world.tick(status, decision.wake_at)
    raise AssertionError(f"run did not terminate in {MAX_PASSES} passes: {status.phase}, {status.message}")


def check_starts(
    plan: Plan, status: WorkflowRunStatus, actions: tuple[Action, ...], world: World, *, crashed: bool = False,
) -> None:
    """Every Job the decision creates has its needs satisfied in the status written with it."""
    entries = {entry.id: entry for entry in status.steps}
    steps = {s.id: s for s in [*plan.spec.steps, *plan.spec.finally_, *plan.spec.compensations]}
    main_ids = {s.id for s in plan.spec.steps}
    for action in actions:
        if not isinstance(action, CreateStepJob):
            continue
        assert (action.step_id, action.attempt) not in world.jobs, "a Job the world shows was created again"
        previous = [a for s, a in world.created if s == action.step_id]
        assert action.attempt <= (max(previous) + 1 if previous else 1), "attempt numbers skip"
        if action.attempt in previous:
            # Only after a crash lost the status that recorded it and the Job vanished: the very same
            # attempt (same Job name and idempotency key) is created again, never a new number for it.
            assert crashed, f"attempt {action.attempt} of {action.step_id} created twice without a crash"
        step = steps[action.step_id]
        for need in step.needs:
            assert _satisfies(entries.get(need), step.run_if_skipped, step_continues(steps, need)), (
                f"{action.step_id} started before its need {need} was satisfied"
            )
        if action.step_id in {s.id for s in plan.spec.finally_}:
            assert all(_finished(entries.get(sid)) for sid in main_ids), "finally step started before the DAG ended"
        if action.mutating and plan.spec.policy.approval.require_for_mutating_actions and action.attempt == 1:
            upstream_gate = any(steps[n].approval is not None for n in step.needs)
            gate = entries.get(gate_id(action.step_id))
            assert upstream_gate or (gate is not None and gate.phase == "Succeeded"), "mutating step ran ungated"


def step_continues(steps: dict[str, Any], need: str) -> bool:
    return bool(steps[need].on_failure == "continue" and steps[need].approval is None)


def _finished(entry: StepStatus | None) -> bool:
    return entry is not None and entry.phase in ("Succeeded", "Failed", "Skipped", "Cancelled") and not (
        entry.paused_for_credentials
    )


def _satisfies(entry: StepStatus | None, run_if_skipped: bool, continues: bool) -> bool:
    if entry is None or not _finished(entry):
        return False
    if entry.phase == "Succeeded":
        return True
    if entry.phase == "Failed":
        return continues
    return entry.phase == "Skipped" and run_if_skipped and entry.reason not in ("NeedFailed", "RunTimeout")


def final_state(status: WorkflowRunStatus) -> dict[str, Any]:
    """What must match between runs: phases, attempts, outputs, classes, reasons, deciders; not timestamps."""
    succeeded = next(c for c in status.conditions if c.type == "Succeeded")
    return {
        "phase": status.phase,
        "reason": succeeded.reason,
        "steps": {
            e.id: (e.phase, e.attempt, e.attempt_group, e.output, e.error_class, e.reason, e.decided_by)
            for e in status.steps
        },
    }


@PROPERTY_SETTINGS
@given(plans())
def test_every_run_terminates_and_starts_steps_only_when_their_needs_are_satisfied(plan: Plan) -> None:
    status, world = simulate(plan, {})
    assert status.phase in TERMINAL_RUN_PHASES
    assert status.wake_at is None
    assert len(world.created) == len(set(world.created))


@PROPERTY_SETTINGS
@given(plans(), st.data())
def test_replay_after_crashes_reaches_the_same_final_state(plan: Plan, data: st.DataObject) -> None:
    uninterrupted, _ = simulate(plan, {})
    crash_passes = data.draw(st.sets(st.integers(0, 60), max_size=8), label="crash passes")
    crashes = {p: data.draw(st.none() | st.integers(0, 4), label=f"actions applied at {p}") for p in crash_passes}
    crashed, _ = simulate(plan, crashes)
    expected, actual = final_state(uninterrupted), final_state(crashed)
    note(json.dumps({"spec": plan.spec.to_wire(), "outcomes": plan.outcomes, "decisions": plan.decisions}))
    differing = {
        step: (expected["steps"].get(step), actual["steps"].get(step))
        for step in sorted(set(expected["steps"]) | set(actual["steps"]))
        if expected["steps"].get(step) != actual["steps"].get(step)
    }
    assert actual == expected, f"uninterrupted vs crashed: {differing}"


@PROPERTY_SETTINGS
@given(plans(), st.integers(0, 20), st.integers(1, 30), st.none() | st.integers(0, 40))
def test_runs_terminate_under_suspend_resume_and_cancel(
    plan: Plan, suspend_at: int, suspended_for: int, cancel_at: int | None,
) -> None:
    status, spec = initial_status(plan)
    world = World(plan)
    catalog = FakeCatalog()
    for index in range(MAX_PASSES):
        suspended = suspend_at <= index < suspend_at + suspended_for
        cancelled = cancel_at is not None and index >= cancel_at
        current = spec.model_copy(update={"suspend": suspended, "cancel": cancelled})
        view = RunView("run", "ns", "uid-1", "wf", current, status, resume_token=world.resume_token)
        decision = decide(view, world.observed(), world.now, catalog)
        check_starts(plan, decision.status, decision.actions, world)
        if suspended and not cancelled:
            assert not any(isinstance(a, CreateStepJob | CreateApproval) for a in decision.actions)
        if cancelled:
            main = {s.id for s in plan.spec.steps}
            assert not any(isinstance(a, CreateStepJob) and a.step_id in main for a in decision.actions)
        for action in decision.actions:
            world.apply(action)
        status = decision.status
        if status.phase in TERMINAL_RUN_PHASES:
            assert not any(job.credentials_missing for job in world.jobs.values()), "a stuck Job outlived the run"
            assert status.phase == "Cancelled" or not cancelled
            return
        world.tick(status, decision.wake_at)
    raise AssertionError(f"run did not terminate: {status.phase}, {status.message}")


@PROPERTY_SETTINGS
@given(plans(), st.lists(st.booleans(), min_size=1, max_size=7))
def test_final_state_does_not_depend_on_the_order_results_arrive(plan: Plan, pace: list[bool]) -> None:
    all_at_once, _ = simulate(plan, {})
    one_by_one, _ = simulate(plan, {}, pace)
    assert final_state(one_by_one) == final_state(all_at_once)


@PROPERTY_SETTINGS
@given(plans(), st.lists(st.booleans(), max_size=7))
def test_a_pass_needs_no_second_pass_unless_it_asks_for_one(plan: Plan, pace: list[bool]) -> None:
    status, spec = initial_status(plan)
    world = World(plan, pace=pace)
    catalog = FakeCatalog()
    for _ in range(MAX_PASSES):
        view = RunView("run", "ns", "uid-1", "wf", spec, status, resume_token=world.resume_token)
        decision = decide(view, world.observed(), world.now, catalog)
        for action in decision.actions:
            world.apply(action)
        status = decision.status
        if status.phase in TERMINAL_RUN_PHASES:
            return
        if decision.wake_at is not None and decision.wake_at <= world.now:
            continue  # it asked for the next pass at once: the operator queues it
        view = RunView("run", "ns", "uid-1", "wf", spec, status, resume_token=world.resume_token)
        again = decide(view, world.observed(), world.now, catalog)
        assert again.actions == (), f"a second pass at once would act: {again.actions}"
        assert again.status.to_wire() == status.to_wire(), "a second pass at once would write another status"
        world.tick(status, decision.wake_at)
    raise AssertionError(f"run did not terminate in {MAX_PASSES} passes: {status.phase}, {status.message}")

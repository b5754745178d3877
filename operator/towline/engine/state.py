"""A run's state during one `decide` pass: the status being built, with pure queries.

Like Tekton's PipelineRunState: "which steps are ready", "is the main DAG
finished", "what does the run end as". The status handed in is never mutated:
the list of steps is copied and a step is copied the first time it changes
(copy-on-write), so a pass over a 1,000-step run copies only what it touches.

A step is listed in `status.steps` from the moment it leaves Pending (like
Tekton's child references and Argo's nodes): an unlisted step is Pending.
That keeps the first pass and the status of a large run in flight small.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from towline.api.run import StepStatus, WorkflowRunStatus
from towline.api.workflow import Step
from towline.engine.graph import ON_FAILURE_CONTINUE, Graph, Stage
from towline.engine.phases import is_finished_step

Verdict = Literal["wait", "ready", "skip"]

BLOCKING_SKIP_REASONS = frozenset({"NeedFailed", "RunTimeout"})
STOPPED = "Stopped"
"""The reason of a run ended by spec.stop, and of each step it ended or kept from starting."""
"""A step skipped for one of these reasons blocks its dependants even when they set runIfSkipped."""


@dataclass(frozen=True)
class NeedsVerdict:
    verdict: Verdict
    reason: str | None = None
    message: str | None = None


_RUN_REASON_BY_STEP_REASON = {"Rejected": "ApprovalRejected", "Expired": "ApprovalExpired"}
_WAIT = NeedsVerdict("wait")
_READY = NeedsVerdict("ready")


@dataclass(frozen=True)
class Outcome:
    """How a finished run ends, derived from its steps alone (so a replay derives the same)."""

    phase: Literal["Succeeded", "Failed", "Cancelled"]
    reason: str
    message: str


class RunState:
    """The status under construction plus the static graph it executes."""

    def __init__(self, status: WorkflowRunStatus, graph: Graph) -> None:
        self.status = status.model_copy()
        self.status.steps = list(status.steps)
        self.status.conditions = list(status.conditions)
        self.graph = graph
        self._index = {step.id: position for position, step in enumerate(self.status.steps)}
        self._owned: set[str] = set()

    # --- reading and editing steps -------------------------------------------------

    def get(self, step_id: str) -> StepStatus | None:
        position = self._index.get(step_id)
        return None if position is None else self.status.steps[position]

    def phase(self, step_id: str) -> str:
        entry = self.get(step_id)
        return "Pending" if entry is None else entry.phase

    def edit(self, step_id: str) -> StepStatus:
        """The step's status, copied on first write in this pass (listed now if it was not yet)."""
        position = self._index.get(step_id)
        if position is None:
            return self.add(StepStatus(id=step_id))
        if step_id not in self._owned:
            self.status.steps[position] = self.status.steps[position].model_copy()
            self._owned.add(step_id)
        return self.status.steps[position]

    def edited(self, step_id: str) -> bool:
        """This pass changed (or listed) the step's entry."""
        return step_id in self._owned

    def edited_ids(self) -> list[str]:
        """The entries this pass changed or listed, in no particular order."""
        return list(self._owned)

    def add(self, step: StepStatus, *, before: str | None = None) -> StepStatus:
        """A new step entry (a triggered compensation, a policy gate), placed before `before` if given."""
        if before is not None and before in self._index:
            self.status.steps.insert(self._index[before], step)
            self._index = {entry.id: position for position, entry in enumerate(self.status.steps)}
        else:
            self._index[step.id] = len(self.status.steps)
            self.status.steps.append(step)
        self._owned.add(step.id)
        return step

    def entries(self) -> Iterator[StepStatus]:
        """The listed steps (a snapshot of the list: safe to add entries while iterating)."""
        return iter(list(self.status.steps))

    def unfinished_before_finally(self) -> list[str]:
        """Unfinished steps of the main DAG (listed or not), their gates, and triggered compensations."""
        found = [step_id for step_id in self.graph.main_order if not self._is_finished(step_id)]
        found[:0] = [  # a loop's instances stop before the loop itself
            entry.id for entry in self.status.steps
            if self.stage_of(entry) != "finally" and entry.id in self.graph.instance_of and not is_finished_step(entry)
        ]
        found.extend(
            entry.id for entry in self.status.steps
            if self.stage_of(entry) != "finally" and (entry.gate_for or self.graph.stage[entry.id] == "compensation")
            and entry.id not in self.graph.instance_of and not is_finished_step(entry)
        )
        return found

    def _is_finished(self, step_id: str) -> bool:
        entry = self.get(step_id)
        return entry is not None and is_finished_step(entry)

    def definition(self, entry: StepStatus) -> Step:
        """The step an entry runs: from the snapshot, or the approval gate the policy inserted."""
        if entry.gate_for is not None:
            return self.graph.gate_step(entry.gate_for)
        return self.graph.steps[entry.id]

    def stage_of(self, entry: StepStatus) -> Stage:
        return self.graph.stage[entry.gate_for or entry.id]

    def in_loop(self, entry: StepStatus) -> bool:
        """A loop's instance or an instance's gate: its loop's entry speaks for it in the run's outcome."""
        return (entry.gate_for or entry.id) in self.graph.instance_of

    # --- queries ---------------------------------------------------------------------

    def deadline(self) -> datetime | None:
        timeout = self.status.workflow_spec.policy.run_timeout_seconds if self.status.workflow_spec else None
        if timeout is None or self.status.started_at is None:
            return None
        return self.status.started_at + timedelta(seconds=timeout)

    def running_jobs(self) -> int:
        return sum(1 for entry in self.status.steps if entry.phase == "Running" and entry.job_name is not None)

    def main_finished(self) -> bool:
        """The DAG, its gates and any triggered compensations are all done."""
        return self._finished("main")

    def finally_finished(self) -> bool:
        return self._finished("finally")

    def _finished(self, stage: Stage) -> bool:
        stage_of = self.graph.stage
        done = 0
        for entry in self.status.steps:
            in_stage = stage_of[entry.gate_for or entry.id] != "finally"
            if in_stage != (stage == "main"):
                continue
            if not is_finished_step(entry):
                return False
            if entry.gate_for is None and stage_of[entry.id] != "compensation" and not self.in_loop(entry):
                done += 1
        expected = len(self.graph.main_order) if stage == "main" else len(self.graph.finally_order)
        return done == expected

    def continues_after_failure(self, entry: StepStatus) -> bool:
        """`onFailure: continue`: dependants treat the failed step as done. Never for approval gates."""
        if entry.gate_for is not None:
            return False
        step = self.graph.steps[entry.id]
        return step.on_failure == ON_FAILURE_CONTINUE and step.approval is None

    def needs_verdict(self, step_id: str) -> NeedsVerdict:
        """Whether a pending step may start, must wait, or is skipped because of what it needs.

        A failed need skips the step at once: whatever its other needs do, it
        can never run. A skipped need skips it only once every need has
        finished, because another need may still fail, and the reason
        (NeedFailed blocks `runIfSkipped` dependants, NeedSkipped does not)
        must not depend on which result the operator happened to see first.
        """
        step = self.graph.steps[step_id]
        stage = self.graph.stage[step_id]
        waiting = False
        skipped: NeedsVerdict | None = None
        for need in step.needs:
            if stage == "finally" and self.graph.stage.get(need) != "finally":
                continue  # finally steps start after the main DAG anyway, whatever its outcome
            verdict = self._need_verdict(need, step.run_if_skipped)
            if verdict.reason == "NeedFailed":
                return verdict
            if verdict.verdict == "skip" and skipped is None:
                skipped = verdict
            waiting = waiting or verdict.verdict == "wait"
        if waiting:
            return _WAIT
        return skipped or _READY

    def _need_verdict(self, need: str, run_if_skipped: bool) -> NeedsVerdict:
        entry = self.get(need)
        if entry is None or not is_finished_step(entry):
            return _WAIT
        blocking_skip = entry.phase == "Skipped" and entry.reason in BLOCKING_SKIP_REASONS
        if (
            entry.phase == "Succeeded"
            or (entry.phase == "Failed" and self.continues_after_failure(entry))
            or (entry.phase == "Skipped" and run_if_skipped and not blocking_skip)
        ):
            return _READY
        if entry.phase == "Skipped" and not blocking_skip:
            return NeedsVerdict("skip", "NeedSkipped", f"skipped: needs {need}, which was skipped")
        what = {"Failed": "failed", "Cancelled": "was cancelled"}.get(entry.phase, "did not run because a step failed")
        return NeedsVerdict("skip", "NeedFailed", f"not run: needs {need}, which {what}")

    def outcome(self, *, cancel_requested: bool, stop_requested: bool = False) -> Outcome:
        """The run's final phase and reason, from the steps' final states."""
        entries = [e for e in self.status.steps if not self.in_loop(e)]
        if stop_requested:
            return Outcome("Cancelled", STOPPED, "the run was stopped (spec.stop): its running steps were ended and "
                           "no step started after, finally steps and compensations included")
        if cancel_requested or any(e.phase == "Cancelled" and self.stage_of(e) != "finally" for e in entries):
            return Outcome("Cancelled", "Cancelled", "the run was cancelled (spec.cancel)")
        failed = self._main_failure() or self._finally_failure()
        if failed is not None:
            return failed
        continued = [e.id for e in entries if e.phase == "Failed"]
        if continued:
            message = f"succeeded; failed with onFailure continue: {', '.join(continued)}"
            return Outcome("Succeeded", "Succeeded", message)
        return Outcome("Succeeded", "Succeeded", "all steps succeeded or were skipped")

    def _failures(self, stage: Stage) -> list[StepStatus]:
        """Failed steps in declaration order (a gate just before its step): not in the order they failed."""
        failed = [
            e for e in self.status.steps
            if e.phase == "Failed" and self.stage_of(e) == stage and not self.continues_after_failure(e)
            and not self.in_loop(e)
        ]
        return sorted(failed, key=self._declared_position)

    def _declared_position(self, entry: StepStatus) -> tuple[int, int]:
        position = self.graph.position[entry.gate_for or entry.id]
        return (position, 0 if entry.gate_for else 1)

    def _main_failure(self) -> Outcome | None:
        """The first failure of the main DAG in step order, so a replay names the same one."""
        entries = [e for e in self.status.steps if not self.in_loop(e)]
        timeouts = [
            e.id for e in sorted(entries, key=self._declared_position)
            if e.reason == "RunTimeout" and self.stage_of(e) != "finally"
        ]
        if timeouts:
            return Outcome("Failed", "RunTimeout", f"the run deadline passed; stopped: {', '.join(timeouts)}")
        failures = self._failures("main")
        cause = _describe_failure(failures[0]) if failures else "a step failed"
        compensations = sorted(
            (e for e in entries if self.stage_of(e) == "compensation"), key=self._declared_position
        )
        if compensations:
            broken = [e.id for e in compensations if e.phase == "Failed"]
            if broken:
                return Outcome("Failed", "CompensationFailed", f"{cause}; compensation {', '.join(broken)} failed too")
            ran = ", ".join(e.id for e in compensations)
            return Outcome("Failed", "Compensated", f"{cause}; compensation {ran} ran")
        if not failures:
            return None
        reason = _RUN_REASON_BY_STEP_REASON.get(failures[0].reason or "", "StepFailed")
        return Outcome("Failed", reason, cause)

    def _finally_failure(self) -> Outcome | None:
        failures = self._failures("finally")
        return Outcome("Failed", "FinallyFailed", f"finally {_describe_failure(failures[0])}") if failures else None


def _describe_failure(entry: StepStatus) -> str:
    detail = f" ({entry.error_class})" if entry.error_class else ""
    message = f": {entry.message}" if entry.message else ""
    return f"step {entry.id} failed{detail}{message}"

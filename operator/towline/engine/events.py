"""The CloudEvents a run's status write announces: phase changes of the run and its steps, approvals asked and decided.

Pure, like towline.engine.traces: the events come from the status before and after one write, so the process whose
write made a change announces it, once; a restarted operator finds the change already written and has nothing to
announce. An event's id is a hash of the run's uid and the transition (never a counter or a random id), so if the
same transition is ever derived twice it is the same event to a receiver that deduplicates by source and id.

What an event carries: ids, names, phases, error classes and the approval's decider. Never a step's inputs or
output, a message (it may quote a provider's answer), params, trigger data, or anything from a Secret.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from towline.api.events import TYPE_PREFIX, DataValue, EventRecord
from towline.api.loopids import loop_of
from towline.api.run import StepStatus, WorkflowRunStatus
from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.engine.phases import TERMINAL_STEP_PHASES
from towline.engine.traces import TracedRun, step_actions
from towline_connectors.wire import rfc3339


def event_source(namespace: str, workflow: str) -> str:
    """The CloudEvents `source` of a workflow's events."""
    return f"/namespaces/{namespace}/workflows/{workflow}"


def event_id(run_uid: str, *transition: str) -> str:
    """The same transition of the same run gives the same id."""
    return hashlib.sha256("\0".join(("towline-event", run_uid, *transition)).encode()).hexdigest()[:32]


def run_events(run: TracedRun, before: WorkflowRunStatus, after: WorkflowRunStatus, now: datetime,
               ) -> list[EventRecord]:
    """The events the write of `after` over `before` makes: the run's phase, each step's phase (a new attempt
    counts as a change), an approval asked for (its Approval named) and decided (its gate over)."""
    earlier = {entry.id: entry for entry in before.steps}
    actions = step_actions(after)
    steps = [event for entry in after.steps for event in _step_events(
        run, earlier.get(entry.id), entry, actions.get(entry.id) or actions.get(loop_of(entry.id) or ""), now)]
    if after.phase in (before.phase, "Pending"):
        return steps
    # In the order a reader expects: a run starts before its steps and ends after them.
    moved = _run_event(run, before, after, now)
    return [*steps, moved] if after.phase in TERMINAL_RUN_PHASES else [moved, *steps]


def _run_event(run: TracedRun, before: WorkflowRunStatus, after: WorkflowRunStatus, now: datetime) -> EventRecord:
    steps = ",".join(sorted(f"{s.id}:{s.phase}:{s.attempt_group}:{s.attempt}" for s in after.steps))
    at = after.finished_at if after.phase in TERMINAL_RUN_PHASES and after.finished_at is not None else now
    return EventRecord(
        id=event_id(run.uid, "run", before.phase, after.phase, steps),
        type=f"{TYPE_PREFIX}run.{after.phase.lower()}", source=event_source(run.namespace, run.workflow),
        subject=f"workflowruns/{run.name}", time=at,
        data={**_run_data(run), "phase": after.phase, "previousPhase": before.phase, "trigger": run.trigger},
    )


def _step_events(run: TracedRun, before: StepStatus | None, entry: StepStatus, action: str | None, now: datetime,
                 ) -> list[EventRecord]:
    events: list[EventRecord] = []
    source = event_source(run.namespace, run.workflow)
    moved = before is None or (before.phase, before.attempt, before.attempt_group) != (
        entry.phase, entry.attempt, entry.attempt_group)
    if moved and entry.phase != "Pending":
        at = entry.finished_at if entry.phase in TERMINAL_STEP_PHASES and entry.finished_at is not None else now
        data: dict[str, DataValue] = {
            **_run_data(run), "step": entry.id, "phase": entry.phase,
            "previousPhase": before.phase if before is not None else "Pending", "attempt": entry.attempt,
            "attemptGroup": entry.attempt_group, "errorClass": str(entry.error_class) if entry.error_class else None,
            "reason": entry.reason,
        }
        if action:
            data["action"] = action
        events.append(EventRecord(
            id=event_id(run.uid, "step", entry.id, str(entry.attempt_group), str(entry.attempt), entry.phase),
            type=f"{TYPE_PREFIX}step.{entry.phase.lower()}", source=source,
            subject=f"workflowruns/{run.name}/steps/{entry.id}", time=at, data=data,
        ))
    if entry.approval_name is None:
        return events
    approval = {**_run_data(run), "step": entry.id, "approval": entry.approval_name}
    if before is None or before.approval_name != entry.approval_name:
        events.append(EventRecord(
            id=event_id(run.uid, "approval", entry.id, entry.approval_name, "requested"),
            type=f"{TYPE_PREFIX}approval.requested", source=source, subject=f"approvals/{entry.approval_name}",
            time=now, data={**approval, "expiresAt": _time(entry.expires_at)},
        ))
    was_over = before is not None and before.phase in TERMINAL_STEP_PHASES
    if entry.phase in TERMINAL_STEP_PHASES and not was_over:
        events.append(EventRecord(
            id=event_id(run.uid, "approval", entry.id, entry.approval_name, "decided"),
            type=f"{TYPE_PREFIX}approval.decided", source=source, subject=f"approvals/{entry.approval_name}",
            time=entry.finished_at or now,
            data={**approval, "outcome": entry.reason or entry.phase, "phase": entry.phase,
                  "decidedBy": entry.decided_by},
        ))
    return events


def _run_data(run: TracedRun) -> dict[str, DataValue]:
    return {"namespace": run.namespace, "workflow": run.workflow, "run": run.name, "runUid": run.uid}


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else rfc3339(moment)


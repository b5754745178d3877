"""The engine: decides what happens next in a run. Pure.

It never performs I/O, never reads a clock or global randomness, never imports
Kubernetes clients, kopf or the operator's I/O layers (import-linter checks).
What it knows about the world comes in as `Observed`; what it wants done goes
out as actions in a `Decision`. Credential values never pass through it: only
Secret names. Event messages never carry step outputs.

    until it may start: held_in_queue(status, run, the workflow's other runs, QueueLimits(...))
                      -> a Decision that keeps it Pending (or ends it if cancelled meanwhile), or None
    first reconcile:  start_run(workflow.spec, generation, run.spec)
                      -> (snapshot, params) to store in status, or errors -> reject_run(...)
    every reconcile:  decide(RunView(...), observed, now, catalog) -> Decision
                      carry out decision.actions, then write decision.status once,
                      then requeue at decision.wake_at (also in status.wakeAt)

How a run behaves (needs, retries, approvals, deadlines, cancel, the outcome) is
documented for users in docs/engine.md; change it there when the engine changes.
"""

from towline.api.runterms import RESUME_ANNOTATION, TERMINAL_RUN_PHASES
from towline.engine.actions import (
    Action,
    CloseApproval,
    CreateApproval,
    CreateNotificationJob,
    CreateStepJob,
    Decision,
    DeleteJob,
    EmitEvent,
    RecordApprovalDecision,
)
from towline.engine.admission import (
    ARCHIVE_BEHIND_REASON,
    QUEUED_CONDITION,
    Admission,
    QueueLimits,
    RunInLine,
    admission,
    archive_behind,
    cancel_queued_run,
    held_in_queue,
    hold_run,
    hold_run_for_archive,
    max_concurrent_runs,
    workflow_runs_in_line,
)
from towline.engine.decide import decide
from towline.engine.idempotency import idempotency_key
from towline.engine.naming import approval_name, gate_id, job_name
from towline.engine.observed import ApprovalObservation, JobObservation, Observed, StepResult
from towline.engine.phases import (
    TERMINAL_STEP_PHASES,
    IllegalTransition,
    transition_run,
    transition_step,
)
from towline.engine.rerun import REUSED_REASON, earlier_requesters, start_retry
from towline.engine.start import reject_run, resolve_params, start_run
from towline.engine.steps import HISTORY_LIMIT, MAX_RUN_OUTPUT_BYTES, MAX_STEP_OUTPUT_BYTES
from towline.engine.view import RunView
from towline.validation.actions import ActionCatalog

__all__ = [
    "ARCHIVE_BEHIND_REASON",
    "HISTORY_LIMIT",
    "MAX_RUN_OUTPUT_BYTES",
    "MAX_STEP_OUTPUT_BYTES",
    "QUEUED_CONDITION",
    "RESUME_ANNOTATION",
    "REUSED_REASON",
    "TERMINAL_RUN_PHASES",
    "TERMINAL_STEP_PHASES",
    "Action",
    "ActionCatalog",
    "Admission",
    "ApprovalObservation",
    "CloseApproval",
    "CreateApproval",
    "CreateNotificationJob",
    "CreateStepJob",
    "Decision",
    "DeleteJob",
    "EmitEvent",
    "IllegalTransition",
    "JobObservation",
    "Observed",
    "QueueLimits",
    "RecordApprovalDecision",
    "RunInLine",
    "RunView",
    "StepResult",
    "admission",
    "approval_name",
    "archive_behind",
    "cancel_queued_run",
    "decide",
    "earlier_requesters",
    "gate_id",
    "held_in_queue",
    "hold_run",
    "hold_run_for_archive",
    "idempotency_key",
    "job_name",
    "max_concurrent_runs",
    "reject_run",
    "resolve_params",
    "start_retry",
    "start_run",
    "transition_run",
    "transition_step",
    "workflow_runs_in_line",
]

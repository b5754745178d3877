"""The engine: decides what happens next in a run. Pure.

It never performs I/O, never reads a clock or global randomness, never imports
Kubernetes clients, kopf or the operator's I/O layers (import-linter checks).
What it knows about the world comes in as `Observed`; what it wants done goes
out as actions in a `Decision`. Credential values never pass through it: only
Secret names. Event messages never carry step outputs.

    first reconcile:  start_run(workflow.spec, generation, run.spec)
                      -> (snapshot, params) to store in status, or errors -> reject_run(...)
    every reconcile:  decide(RunView(...), observed, now, catalog) -> Decision
                      carry out decision.actions, then write decision.status once,
                      then requeue at decision.wake_at (also in status.wakeAt)

Semantics the issue left open, as implemented:
- A step is listed in status.steps once it leaves Pending; an unlisted step is Pending.
- A failed need skips a step at once; a skipped need skips it only when all its needs
  have finished, so the reason (NeedFailed blocks runIfSkipped, NeedSkipped does not)
  never depends on which result was seen first. Independent branches keep running
  after a failure (no fail-fast).
- `when` and bindings may read only finished steps; reading an unfinished one fails the
  step (validation) with "add <id> to needs". A `when` is evaluated once a slot under
  `parallelism` is free for the step.
- Retries: `retry.limit` counts every attempt of the step; `auth` and
  `unknown_side_effect` are never retried by backoff whatever `retryOn` says. A retry
  whose start would pass the run deadline is not scheduled (RetryPastDeadline).
- `auth` pauses the step (Failed, pausedForCredentials) and the run (Waiting,
  CredentialsNeedRepair). A new towline.dev/resume value retries it at once as a new
  attempt in a new attempt group (new idempotency key: the provider refused the call).
- A Job that vanished, or ended without a result, fails its attempt as
  `unknown_side_effect` when the action mutates, `transient` otherwise.
- Approval gates ignore `onFailure: continue` (a rejection never lets a step through).
  Approvals expire by the wall clock even while the run is suspended (the gate fails at
  once; the run ends when resumed or cancelled). A decision made after expiresAt does
  not count. The policy gate `<step>__approval` is inserted only before a step whose
  rendered inputs the catalog calls mutating, unless an approval step is directly
  upstream; retries never ask again.
- The run deadline stops the main DAG, its gates and compensations (running ones Failed
  with `timeout`, pending ones Skipped) and does not trigger compensations; finally
  steps still run and are never stopped by it.
- Cancel stops everything but finally steps (which run, and are not cancelled), and wins
  over suspend. A failed step's compensation starts right away (once, even if several
  steps name it); compensations ignore `needs`.
- The run's reason is derived from the final step states in declaration order:
  Cancelled, RunTimeout, Compensated/CompensationFailed, ApprovalRejected/ApprovalExpired,
  StepFailed, FinallyFailed, Succeeded.
"""

from towline.engine.actions import (
    Action,
    CloseApproval,
    CreateApproval,
    CreateStepJob,
    Decision,
    DeleteJob,
    EmitEvent,
    RecordApprovalDecision,
)
from towline.engine.decide import decide
from towline.engine.idempotency import idempotency_key
from towline.engine.naming import approval_name, gate_id, job_name
from towline.engine.observed import ApprovalObservation, JobObservation, Observed, StepResult
from towline.engine.phases import (
    TERMINAL_RUN_PHASES,
    TERMINAL_STEP_PHASES,
    IllegalTransition,
    transition_run,
    transition_step,
)
from towline.engine.start import reject_run, resolve_params, start_run
from towline.engine.steps import HISTORY_LIMIT, MAX_RUN_OUTPUT_BYTES, MAX_STEP_OUTPUT_BYTES
from towline.engine.view import RESUME_ANNOTATION, ActionCatalog, RunView

__all__ = [
    "HISTORY_LIMIT",
    "MAX_RUN_OUTPUT_BYTES",
    "MAX_STEP_OUTPUT_BYTES",
    "RESUME_ANNOTATION",
    "TERMINAL_RUN_PHASES",
    "TERMINAL_STEP_PHASES",
    "Action",
    "ActionCatalog",
    "ApprovalObservation",
    "CloseApproval",
    "CreateApproval",
    "CreateStepJob",
    "Decision",
    "DeleteJob",
    "EmitEvent",
    "IllegalTransition",
    "JobObservation",
    "Observed",
    "RecordApprovalDecision",
    "RunView",
    "StepResult",
    "approval_name",
    "decide",
    "gate_id",
    "idempotency_key",
    "job_name",
    "reject_run",
    "resolve_params",
    "start_run",
    "transition_run",
    "transition_step",
]

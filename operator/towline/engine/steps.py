"""Moving one step: start an attempt, read its Job, retry or fail it, open and close gates, wait.

Every phase change goes through `transition_step`. Actions and events are
appended to the pass's list; nothing here performs I/O or reads a clock.
Event messages name steps, error classes and error messages, never outputs.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Literal

from towline.api.run import AttemptRecord, StepStatus
from towline.api.steptype import ResolvedStepType
from towline.api.workflow import RetryPolicy
from towline.engine.actions import (
    Action,
    CloseApproval,
    CreateStepJob,
    DeleteJob,
    EmitEvent,
    EventType,
    SetChildRun,
)
from towline.engine.bindings import Bindings
from towline.engine.graph import ON_FAILURE_CONTINUE, ON_FAILURE_FAIL
from towline.engine.idempotency import idempotency_key
from towline.engine.naming import job_name
from towline.engine.observed import REASON_DEADLINE, REASON_POD_REFUSED, Observed
from towline.engine.phases import transition_step
from towline.engine.retry import jitter_seed, may_retry, retry_delay_seconds
from towline.engine.state import STOPPED, RunState
from towline.engine.view import RunView
from towline.expressions import ExpressionError
from towline.text import clip
from towline.validation.actions import ActionCatalog
from towline.validation.steptypes import output_errors
from towline_connectors.wire import EGRESS_NOT_ISOLATED_MESSAGE, rfc3339
from towline_step.protocol import ErrorClass

EGRESS_ISOLATION_MISSING = "EgressIsolationMissing"
"""Event reason for an attempt whose pod never became isolated; towline.k8s posts it rate-limited per namespace."""
MAX_STEP_OUTPUT_BYTES = 4096
"""A step's output kept in status, as compact JSON; larger fails the step with `output_too_large`."""
MAX_RUN_OUTPUT_BYTES = 256 * 1024
"""All outputs of one run together: keeps the status object far below etcd's object size limit."""
HISTORY_LIMIT = 10
"""Finished attempts kept per step; older ones are dropped (the count survives in `attempt`)."""

def error_class_of(value: str | None) -> ErrorClass:
    """A step's reported class; anything unknown is permanent (never retried on a guess)."""
    try:
        return ErrorClass(value or ErrorClass.PERMANENT)
    except ValueError:
        return ErrorClass.PERMANENT


def output_size(output: Any) -> int:
    return len(json.dumps(output, separators=(",", ":"), ensure_ascii=False, default=str).encode())


class StepDriver:
    """The step-level half of one `decide` pass."""

    def __init__(
        self, run: RunView, observed: Observed, now: datetime, catalog: ActionCatalog, *,
        state: RunState, bindings: Bindings, web_view_url: str | None = None,
    ) -> None:
        self.run = run
        self.web_view_url = web_view_url
        """The web view's origin, which approval notifications link to (None: they carry commands only)."""
        self.observed = observed
        self.now = now
        self.catalog = catalog
        self.state = state
        self.bindings = bindings
        self.actions: list[Action] = []
        self.ran_images: dict[str, str | None] = {}
        """What each step's finished attempt ran (the kubelet's imageID), for its attempt record."""

    def event(self, kind: EventType, reason: str, message: str) -> None:
        self.actions.append(EmitEvent(kind, reason, clip(message, 1024) or ""))

    # --- actions ---------------------------------------------------------------------

    def start_attempt(
        self, step_id: str, inputs: dict[str, Any], mutating: bool, allow_hosts: tuple[str, ...] = ()
    ) -> None:
        """Start the next attempt, or adopt its Job when a crash lost the status that recorded it."""
        step = self.state.graph.steps[step_id]
        entry = self.state.edit(step_id)
        attempt = entry.attempt + 1
        observation = self.observed.jobs.get((step_id, attempt))
        transition_step(entry, "Running", at=(observation.started_at if observation else None) or self.now)
        entry.attempt = attempt
        entry.job_name = observation.job_name if observation else job_name(self.run.name, step_id, attempt)
        entry.retry_at = entry.error_class = entry.message = None
        entry.mutating = mutating
        entry.credentials_used = sorted(set(step.credentials.values()))
        entry.idempotency_key = idempotency_key(self.run.workflow_name, self.run.uid, step_id, entry.attempt_group)
        if observation is not None:
            self.observe_job(step_id)
            return
        assert step.action is not None
        step_type = self.step_type(step.action)
        self.actions.append(CreateStepJob(
            step_id=step_id, attempt=attempt, job_name=entry.job_name, action=step.action, inputs=inputs,
            credentials=dict(step.credentials),
            egress=tuple(rule.to_wire() for rule in step.egress),
            allow_private_networks=tuple(step.allow_private_networks), allow_hosts=allow_hosts,
            timeout_seconds=step.timeout_seconds or (step_type.spec.timeout_seconds if step_type else None),
            idempotency_key=entry.idempotency_key, mutating=mutating, step_type=step_type, resources=step.resources,
            pod_metadata=step.pod_metadata,
        ))

    def step_type(self, action: str | None) -> ResolvedStepType | None:
        """The user type `action` names, as this run resolved it when it started."""
        snapshot = self.run.status.workflow_spec
        return snapshot.step_types.get(action) if snapshot is not None and action else None

    def lost_attempt_class(self, step_id: str) -> ErrorClass:
        """An attempt that ended without a word: it may have acted if it mutates, unless its user type honours
        the idempotency key (a retry with the same key cannot act twice), so only then is it worth retrying."""
        entry = self.state.get(step_id)
        assert entry is not None
        step_type = self.step_type(self.state.graph.steps[step_id].action)
        if not entry.mutating or (step_type is not None and step_type.spec.idempotency_key):
            return ErrorClass.TRANSIENT
        return ErrorClass.UNKNOWN_SIDE_EFFECT

    def silent_end_class(self, step_id: str, reason: str | None) -> ErrorClass:
        """The class of an attempt whose pod ended without a result document, by why it ended.

        A refused pod never ran (transient); one stopped at its deadline ran past its time limit, which is what
        `timeout` means whether the runner or the kubelet enforced it (unless it may have acted: then
        `unknown_side_effect`, as for any other attempt lost without a word).
        """
        if reason == REASON_POD_REFUSED:
            return ErrorClass.TRANSIENT
        lost = self.lost_attempt_class(step_id)
        if reason == REASON_DEADLINE and lost == ErrorClass.TRANSIENT:
            return ErrorClass.TIMEOUT
        return lost

    def observe_job(self, step_id: str) -> None:
        entry = self.state.get(step_id)
        assert entry is not None and entry.phase == "Running"
        observation = self.observed.jobs.get((step_id, entry.attempt))
        if observation is None:
            self.fail_attempt(
                step_id, self.lost_attempt_class(step_id),
                f"the step's Job {entry.job_name} disappeared before it reported a result", retryable=None,
            )
            return
        if observation.state == "active":
            return
        finished_at = observation.finished_at or self.now
        self.ran_images[step_id] = observation.image
        result = observation.result
        if result is None:
            happened = "succeeded" if observation.state == "succeeded" else "failed"
            why = f"({observation.reason or 'no reason given'})"
            if observation.reason == REASON_DEADLINE:
                why += (": it ran past the step's timeoutSeconds (counted from the Job's start); raise it if "
                        "the work is real")
            elif observation.reason == REASON_POD_REFUSED:
                why += f": the API server refused its pod (the Job's Failed condition says why: kubectl describe job " \
                       f"{observation.job_name}); nothing ran"
            self.fail_attempt(
                step_id, self.silent_end_class(step_id, observation.reason),
                f"the step's Job {observation.job_name} {happened} without a result {why}",
                retryable=None, finished_at=finished_at,
            )
        elif result.ok and (problems := self.output_problems(step_id, result.output)):
            self.fail_attempt(
                step_id, ErrorClass.PERMANENT, "the step's output does not match its type's outputs schema: "
                + "; ".join(problems), retryable=False, finished_at=finished_at,
            )
        elif result.ok:
            self.complete_attempt(step_id, result.output, result.usage, finished_at)
        else:
            error_class = error_class_of(result.error_class)
            message = result.message or f"the step failed with error class {error_class}"
            if result.error_class is not None and result.error_class != error_class:
                message = f"unknown error class {result.error_class!r} treated as permanent: {message}"
            self.fail_attempt(
                step_id, error_class, message, retryable=result.retryable,
                retry_after=result.retry_after_seconds, finished_at=finished_at,
                usage=dict(result.usage) if result.usage is not None else None,
            )

    def output_problems(self, step_id: str, output: Any) -> list[str]:
        """What is wrong with a user type's output, by its outputs schema; [] for built-ins."""
        step_type = self.step_type(self.state.graph.steps[step_id].action)
        return output_errors(step_type.spec.outputs, output) if step_type is not None else []

    def complete_attempt(self, step_id: str, output: Any, usage: Any, finished_at: datetime) -> None:
        size = output_size(output)
        status = self.state.status
        if size > MAX_STEP_OUTPUT_BYTES:
            self.fail_attempt(
                step_id, ErrorClass.OUTPUT_TOO_LARGE,
                f"the step's output is {size} bytes of JSON; the limit is {MAX_STEP_OUTPUT_BYTES} bytes per step. "
                "Return only the fields later steps need, or store large data elsewhere and return a reference",
                retryable=False, finished_at=finished_at,
            )
            return
        if status.output_bytes + size > MAX_RUN_OUTPUT_BYTES:
            self.fail_attempt(
                step_id, ErrorClass.OUTPUT_TOO_LARGE,
                f"the run's outputs would reach {status.output_bytes + size} bytes; the limit is "
                f"{MAX_RUN_OUTPUT_BYTES} bytes per run. Return less from each step",
                retryable=False, finished_at=finished_at,
            )
            return
        entry = self.state.edit(step_id)
        transition_step(entry, "Succeeded", at=finished_at)
        entry.output = output
        entry.usage = dict(usage) if usage is not None else None
        self._record_attempt(entry, None, None)
        status.output_bytes += size

    def fail_attempt(
        self, step_id: str, error_class: ErrorClass, message: str, *, retryable: bool | None,
        retry_after: float | None = None, finished_at: datetime | None = None, usage: dict[str, Any] | None = None,
    ) -> None:
        """An attempt failed: pause for credentials, retry, or fail the step (and trigger onFailure)."""
        entry = self.state.edit(step_id)
        ended = finished_at or self.now
        entry.error_class = error_class
        entry.message = clip(message, 2048)
        entry.usage = usage
        self._record_attempt(entry, error_class, message, finished_at=ended)
        attempt = f"step {step_id} attempt {entry.attempt} failed ({error_class}): {message}"
        if message == EGRESS_NOT_ISOLATED_MESSAGE:
            self.event("Warning", EGRESS_ISOLATION_MISSING, attempt)
        cancelling = self.run.spec.cancel or self.run.spec.stop
        if error_class == ErrorClass.AUTH and not cancelling:
            transition_step(entry, "Failed", at=ended, reason="CredentialsNeedRepair")
            entry.paused_for_credentials = True
            # A token already on the run predates this failure: only a new one resumes it.
            self.state.status.resume_token = self.run.resume_token
            secrets = ", ".join(entry.credentials_used) or "(none named)"
            self.event("Warning", "CredentialsNeedRepair", f"{attempt}; repair Secret(s) {secrets} and resume the run")
            return
        if error_class == ErrorClass.UNKNOWN_SIDE_EFFECT:
            transition_step(entry, "Failed", at=ended, reason="SideEffectUnknown")
            self.event("Warning", "StepFailed", f"{attempt}; not retried: a person must check whether it took effect")
            self.after_failure(step_id)
            return
        step = self.state.definition(entry)
        policy = step.retry or (self.catalog.default_retry(step.action) if step.action else None)
        if not cancelling and may_retry(policy, entry.attempt, error_class, retryable):
            assert policy is not None
            self._schedule_retry(entry, policy, retry_after=retry_after, attempt=attempt, ended=ended)
            return
        exhausted = (
            policy is not None and policy.limit > 0 and error_class in policy.retry_on and retryable is not False
        )
        transition_step(entry, "Failed", at=ended, reason="RetriesExhausted" if exhausted else "Failed")
        self.event("Warning", "StepFailed", attempt)
        self.after_failure(step_id)

    def _schedule_retry(
        self, entry: StepStatus, policy: RetryPolicy, *, retry_after: float | None, attempt: str, ended: datetime
    ) -> None:
        """Retrying with a persisted wake-up time, unless that time is past the run deadline."""
        seed = jitter_seed(self.run.uid, entry.id, entry.attempt)
        delay = retry_delay_seconds(policy, entry.attempt, seed=seed, retry_after_seconds=retry_after)
        retry_at = self.now + timedelta(seconds=delay)
        deadline = self.state.deadline()
        if deadline is not None and retry_at > deadline:
            transition_step(
                entry, "Failed", at=ended, reason="RetryPastDeadline",
                message=f"{entry.message}; not retried: the next attempt at {rfc3339(retry_at)} would start after "
                f"the run deadline {rfc3339(deadline)}",
            )
            self.event("Warning", "StepFailed", f"{attempt}; not retried: a retry would start after the run deadline")
            self.after_failure(entry.id)
            return
        transition_step(entry, "Retrying", at=ended, reason="RetryScheduled")
        entry.retry_at = retry_at
        self.event("Normal", "StepRetryScheduled", f"{attempt}; attempt {entry.attempt + 1} at {rfc3339(retry_at)}")

    def after_failure(self, step_id: str) -> None:
        """A main step failed for good: trigger the compensation its onFailure names, once."""
        entry = self.state.get(step_id)
        assert entry is not None
        if self.state.stage_of(entry) != "main" or entry.gate_for is not None:
            return
        compensation = self.state.graph.steps[step_id].on_failure
        if compensation in (ON_FAILURE_FAIL, ON_FAILURE_CONTINUE) or self.state.get(compensation) is not None:
            return
        self.state.add(StepStatus(id=compensation))
        self.event("Normal", "CompensationTriggered", f"step {step_id} failed; running compensation {compensation}")

    def retry_now(self, step_id: str) -> None:
        """A person resumed the run after repairing credentials: a new attempt group, due at once."""
        entry = self.state.edit(step_id)
        transition_step(entry, "Retrying", at=self.now, reason="CredentialsRepaired")
        entry.paused_for_credentials = False
        entry.attempt_group += 1
        entry.retry_at = self.now
        self.event("Normal", "StepResumed", f"step {step_id} resumed after credential repair")

    def fail_before_start(self, step_id: str, error: ExpressionError) -> None:
        """A `when` or binding that cannot be evaluated: the author's error, never retried."""
        entry = self.state.edit(step_id)
        entry.error_class = ErrorClass.VALIDATION
        transition_step(entry, "Failed", at=self.now, reason="InvalidExpression", message=str(error))
        self.event("Warning", "StepFailed", f"step {step_id} could not start (validation): {error}")
        self.after_failure(step_id)

    def stop(self, step_id: str, to: Literal["Failed", "Cancelled", "Skipped"], reason: str, message: str) -> None:
        """Cancel or run deadline: delete the Job, cancel the Approval, leave the step in `to`."""
        edited = self.state.edit(step_id)
        if edited.paused_for_credentials:
            edited.paused_for_credentials = False
            edited.reason = reason  # stays Failed: its last attempt did fail
            edited.message = clip(f"{edited.message}; {message}", 2048)
            return
        if edited.phase == "Running" and edited.job_name is not None:
            self.actions.append(DeleteJob(edited.job_name))
            self._record_attempt(edited, ErrorClass.TIMEOUT if to == "Failed" else None, message, finished_at=self.now)
        if edited.phase == "Running" and edited.approval_name is not None:
            self.actions.append(CloseApproval(edited.approval_name, "Cancelled"))
        if edited.phase == "Running" and edited.child_run is not None:
            # A subflow's child is cancelled as a run is (it runs its finally steps); on a deadline too.
            # A stopped run stops its child (no finally steps there either).
            self.actions.append(SetChildRun(edited.child_run, cancel=True, stop=True if reason == STOPPED else None))
        if to == "Failed":
            edited.error_class = ErrorClass.TIMEOUT
        transition_step(edited, to, at=self.now, reason=reason, message=message)

    # --- bookkeeping -----------------------------------------------------------------

    def _record_attempt(
        self, entry: StepStatus, error_class: ErrorClass | None, message: str | None,
        *, finished_at: datetime | None = None,
    ) -> None:
        record = AttemptRecord(
            attempt=max(entry.attempt, 1), job_name=entry.job_name, started_at=entry.started_at,
            finished_at=finished_at or entry.finished_at or self.now, error_class=error_class,
            message=clip(message, 1024), image=clip(self.ran_images.get(entry.id), 512),
        )
        entry.history = [*entry.history, record][-HISTORY_LIMIT:]

"""`decide`: what happens next in a run, as a pure function of its status and the world.

    decide(run, observed, now, catalog) -> Decision(status, actions, wake_at)

No I/O, no clock reads, no global randomness: time and observations are
arguments, retry jitter is seeded from the run. The operator carries out the
actions (idempotently) and then writes the status once; if it crashes in
between, calling `decide` again with the old status and what it now observes
reaches the same result, because every Job or Approval the world already
shows is adopted instead of created again.

One pass, in order: start the run; consume a resume token; read every running
step's Job, Approval or wait; apply cancel and the run deadline; start what is
ready (main DAG in topological order, then triggered compensations, then
`finally` once the rest is done); end the run or summarise its active phase.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from towline.api.run import StepStatus
from towline.api.runterms import RESUME_ANNOTATION, TERMINAL_RUN_PHASES
from towline.engine.actions import CreateChildRun, Decision, DeleteJob
from towline.engine.admission import leave_queue
from towline.engine.bindings import Bindings
from towline.engine.egress import allowed_hosts
from towline.engine.gates import Gates
from towline.engine.graph import Graph
from towline.engine.loops import Loops, expand_loops
from towline.engine.naming import gate_id
from towline.engine.observed import JobObservation, Observed
from towline.engine.outputs import OutputsProblem, evaluate_outputs
from towline.engine.phases import is_finished_step, transition_run, transition_step
from towline.engine.state import STOPPED, Outcome, RunState
from towline.engine.steps import StepDriver
from towline.engine.subflows import Subflows
from towline.engine.summary import current_step_text, has_condition, phase_message, set_condition, summarize
from towline.engine.view import RunView
from towline.expressions import ExpressionError
from towline.text import clip
from towline.validation.actions import ActionCatalog
from towline.validation.schemaguard import bounded_schema_work
from towline.validation.steptypes import input_errors
from towline_connectors.wire import rfc3339
from towline_step.protocol import ErrorClass


def decide(run: RunView, observed: Observed, now: datetime, catalog: ActionCatalog, *,
           web_view_url: str | None = None) -> Decision:
    """The next status of `run`, the actions to carry out before writing it, and when to look again.
    `web_view_url`: the web view's origin, which approval notifications link to."""
    if now.tzinfo is None:
        raise ValueError("decide needs a timezone-aware `now`")
    if run.status.phase in TERMINAL_RUN_PHASES:
        return Decision(status=run.status.model_copy(), actions=(), wake_at=None)
    if run.status.workflow_spec is None:
        raise ValueError("status.workflowSpec is not set; call start_run on the run's first reconcile")
    with bounded_schema_work():  # every step type's schema check in this pass, together
        return _Pass(run, observed, now, catalog, web_view_url).run()


class _Slots:
    """Jobs that may still start in this pass under the run's parallelism limit."""

    def __init__(self, free: int) -> None:
        self.free = free


class _Pass:
    def __init__(self, run: RunView, observed: Observed, now: datetime, catalog: ActionCatalog,
                 web_view_url: str | None = None) -> None:
        assert run.status.workflow_spec is not None
        self.view = run
        self.now = now
        self.catalog = catalog
        self.policy = run.status.workflow_spec.policy
        self.graph = Graph.build(run.status.workflow_spec)
        self.state = RunState(run.status, self.graph)
        expand_loops(self.state)
        self.bindings = Bindings(run, self.state, self._phase_for_expressions)
        self.driver = StepDriver(run, observed, now, catalog, state=self.state, bindings=self.bindings,
                                 web_view_url=web_view_url)
        self.gates = Gates(self.driver)
        self.subflows = Subflows(self.driver)
        self.slots = _Slots(0)
        self.loops = Loops(self.driver, lambda entry_id: self._schedule_step(entry_id, self.slots))
        self.observed = observed
        self._deleted: set[str] = set()
        self.cancelling = run.spec.cancel
        # Stop (argo terminate) wins over cancel: nothing more starts, not even finally steps.
        self.stopping = run.spec.stop
        # Cancel wins over suspend: a cancelled run still runs its finally steps and ends.
        self.suspended = run.spec.suspend and not run.spec.cancel and not run.spec.stop

    def run(self) -> Decision:
        status = self.state.status
        self._delete_stuck_jobs(self.view.status.steps)
        if status.phase == "Pending":
            transition_run(status, "Running")
            status.started_at = self.now
            leave_queue(status, self.now)
            self.driver.event("Normal", "RunStarted", f"run started ({len(self.graph.main_order)} steps)")
        self._update_suspension()
        self._consume_resume_token()
        self._observe_running_steps()
        if self.stopping:
            self._stop()
        elif self.cancelling:
            self._cancel()
        deadline = self.state.deadline()
        if deadline is not None and self.now >= deadline and not self.state.main_finished():
            self._stop_at_deadline()
        if not self.suspended and not self.stopping:
            self._schedule()
        self.gates.announce()
        self.loops.compact_the_rest()
        return self._conclude()

    # --- pass stages -------------------------------------------------------------------

    def _delete_stuck_jobs(self, recorded_in: list[StepStatus] | None) -> None:
        """Delete the Jobs whose step found a Secret it names missing (REASON_UNMOUNTABLE).

        Such a Job counts as a failed attempt (credentials need repair); its pod ran no action,
        and the resume after the repair runs a new attempt. A pass deletes it once the status
        handed in records that attempt as over, and before anything else, so no replacement
        starts first. Not
        in the pass that records it: after a crash between the delete and the status write,
        the next pass would find the attempt's Job gone and could no longer say why it failed.
        """
        for job in self._stuck_jobs(recorded_in):
            self._deleted.add(job.job_name)
            self.driver.actions.append(DeleteJob(job.job_name))

    def _stuck_jobs(self, recorded_in: list[StepStatus] | None) -> list[JobObservation]:
        """The stuck Jobs (credentials missing) this pass has not deleted yet: those whose attempt
        `recorded_in` records as over, or every one (None)."""
        return [job for job in self.observed.jobs.values()
                if job.credentials_missing and job.job_name not in self._deleted
                and (recorded_in is None or _over_in(recorded_in, job))]

    def _leaves_stuck_jobs(self) -> bool:
        """This pass records a stuck Job's attempt as over, so the pass after its write deletes the Job.

        Nothing else wakes that pass (the stuck Job does not change, and the echo of the operator's own
        write wakes nobody), so the decision asks for it at once.
        """
        return bool(self._stuck_jobs(self.state.status.steps))

    def _started_children(self) -> bool:
        """This pass starts a child run: the pass after its write reads it, so a run found under its name that is
        not the child (whose events, unlike the child's, wake nobody) fails the step at once."""
        return any(isinstance(action, CreateChildRun) for action in self.driver.actions)

    def _update_suspension(self) -> None:
        status = self.state.status
        if self.view.spec.suspend:
            if not has_condition(status, "Suspended", "True"):
                self.driver.event("Normal", "RunSuspended", "spec.suspend is true: no new step starts")
            set_condition(status, "Suspended", "True", reason="Suspended",
                          message="spec.suspend is true: no new step starts; running steps finish", now=self.now)
        elif has_condition(status, "Suspended", "True"):
            self.driver.event("Normal", "RunResumed", "spec.suspend is false: the run continues")
            set_condition(status, "Suspended", "False", reason="Resumed", message="the run continues", now=self.now)

    def _consume_resume_token(self) -> None:
        token = self.view.resume_token
        status = self.state.status
        if token is None or token == status.resume_token:
            return
        status.resume_token = token
        if self.cancelling:
            return
        for entry in self.state.entries():
            if entry.paused_for_credentials:
                self.driver.retry_now(entry.id)

    def _observe_running_steps(self) -> None:
        for entry in self.state.entries():
            if entry.phase != "Running" or entry.loop is not None:  # a loop's instances are entries of their own
                continue
            if entry.job_name is not None:
                self.driver.observe_job(entry.id)
            elif entry.child_run is not None:
                self.subflows.observe(entry.id)
            elif entry.approval_name is not None:
                self.gates.observe_approval(entry.id)
            else:
                self.gates.observe_wait(entry.id)

    def _cancel(self) -> None:
        for step_id in self.state.unfinished_before_finally():
            self.driver.stop(step_id, "Cancelled", "Cancelled", "cancelled: the run was cancelled")
        for entry in self.state.entries():
            if entry.paused_for_credentials:  # a finally step: it keeps Failed, nobody will repair it now
                self.driver.stop(entry.id, "Cancelled", "Cancelled", "given up: the run was cancelled")

    def _stop(self) -> None:
        """spec.stop: end every unfinished step now (Jobs deleted, Approvals closed, child runs stopped), and
        keep every finally step and compensation that has not started from starting; the run ends this pass."""
        message = "stopped: the run was stopped (spec.stop)"
        unfinished = [*self.state.unfinished_before_finally(),
                      *(e.id for e in self.state.entries()
                        if self.state.stage_of(e) == "finally" and not is_finished_step(e))]
        for step_id in unfinished:
            if self.state.phase(step_id) == "Pending":
                self._skip(step_id, STOPPED, message)
            else:
                self.driver.stop(step_id, "Cancelled", STOPPED, message)
        for step_id in self.graph.finally_order:
            if self.state.get(step_id) is None:
                self._skip(step_id, STOPPED, "not run: the run was stopped (spec.stop)")
        self.driver.event("Warning", "RunStopped", f"{message}; ended {len(unfinished)} step(s), started no other")

    def _stop_at_deadline(self) -> None:
        deadline = self.state.deadline()
        assert deadline is not None
        message = f"stopped: the run deadline ({rfc3339(deadline)}) passed"
        stopped = self.state.unfinished_before_finally()
        for step_id in stopped:
            # A step that never started did not fail: it is skipped, and blocks its dependants.
            if self.state.phase(step_id) == "Pending":
                self.driver.stop(step_id, "Skipped", "RunTimeout", message)
            else:
                self.driver.stop(step_id, "Failed", "RunTimeout", message)
        self.driver.event("Warning", "RunDeadlineExceeded", f"{message}; stopped {len(stopped)} step(s)")

    def _schedule(self) -> None:
        slots = self.slots = _Slots(self.policy.parallelism - self.state.running_jobs())
        for step_id in self.graph.main_order:
            self._schedule_step(step_id, slots)
        for entry in self.state.entries():
            if self.state.stage_of(entry) == "compensation" and entry.gate_for is None \
                    and entry.id not in self.graph.instance_of:
                self._schedule_step(entry.id, slots)
        if self.state.main_finished():
            for step_id in self.graph.finally_order:
                self._schedule_step(step_id, slots)

    def _schedule_step(self, step_id: str, slots: _Slots) -> None:
        entry = self.state.get(step_id)
        if entry is not None and entry.phase == "Running" and entry.loop is not None:
            self.loops.advance(step_id)
        elif entry is None or entry.phase == "Pending":
            self._schedule_pending(step_id, slots)
        elif entry.phase == "Retrying" and (entry.retry_at is None or entry.retry_at <= self.now):
            self._start_action(step_id, slots)

    def _schedule_pending(self, step_id: str, slots: _Slots) -> None:
        step = self.graph.steps[step_id]
        if self.graph.stage[step_id] != "compensation":
            verdict = self.state.needs_verdict(step_id)
            if verdict.verdict == "wait":
                return
            if verdict.verdict == "skip":
                self._skip(step_id, verdict.reason or "NeedFailed", verdict.message or "not run")
                return
        if step.for_each is not None:
            self.loops.start(step_id)  # each instance evaluates `when` and takes a slot of its own
            return
        if step.kind == "action" and slots.free <= 0:
            return  # decided when a slot frees: a step blocked by parallelism costs nothing per pass
        try:
            if step.when is not None and not self.bindings.when(step):
                self._skip(step_id, "ConditionFalse", "skipped: its when condition is false")
                return
        except ExpressionError as error:
            self.driver.fail_before_start(step_id, error)
            return
        if step.kind == "approval":
            self.gates.open_gate(step_id, step, self.graph.dependants(step_id))
        elif step.kind == "wait":
            self.gates.start_wait(step_id, step)
        elif step.kind == "subflow":
            self.subflows.start(step_id)
        else:
            self._start_action(step_id, slots)

    def _start_action(self, step_id: str, slots: _Slots) -> None:
        if slots.free <= 0:
            return
        step = self.graph.steps[step_id]
        assert step.action is not None
        try:
            inputs = self.bindings.inputs(step)
        except ExpressionError as error:
            self.driver.fail_before_start(step_id, error)
            return
        try:
            hosts = allowed_hosts(step, self.catalog)
            self._check_type_inputs(step.action, inputs)
        except ExpressionError as error:
            self.driver.fail_before_start(step_id, error)
            return
        mutating = self.catalog.is_mutating(step.action, inputs)
        if self.state.phase(step_id) == "Pending" and mutating and not self._gate_passed(step_id):
            return
        slots.free -= 1
        self.driver.start_attempt(step_id, inputs, mutating, hosts)

    def _check_type_inputs(self, action: str, inputs: dict[str, Any]) -> None:
        """A user type's inputs with bindings resolved fit its input schema; else the step cannot start."""
        step_type = self.driver.step_type(action)
        if step_type is None:
            return
        problems = input_errors(step_type.spec.inputs, inputs, allow_templates=False)
        if problems:
            raise ExpressionError(f"the inputs, resolved, do not match {action}'s inputs schema: "
                                  + "; ".join(problems))

    def _gate_passed(self, step_id: str) -> bool:
        """The policy's approval gate before a mutating step: open it, wait for it, or pass."""
        gate = self.state.get(gate_id(step_id))
        if gate is None:
            policy = self.policy.approval
            if not policy.require_for_mutating_actions or self.gates.approved_upstream(step_id, policy):
                return True
            self.state.add(StepStatus(id=gate_id(step_id), gate_for=step_id), before=step_id)
            self.gates.open_gate(gate_id(step_id), self.graph.gate_step(step_id), [step_id])
            gate = self.state.get(gate_id(step_id))
            assert gate is not None
        if gate.phase == "Succeeded":
            return True
        if gate.phase in ("Failed", "Cancelled", "Skipped"):
            self._skip(step_id, "NeedFailed", f"not run: its approval gate {gate.id} did not pass")
        return False

    def _skip(self, step_id: str, reason: str, message: str) -> None:
        transition_step(self.state.edit(step_id), "Skipped", at=self.now, reason=reason, message=message)

    # --- the end of the pass -------------------------------------------------------------

    def _phase_for_expressions(self) -> str:
        """`run.phase` in CEL: once only finally steps remain, the phase the run will end in."""
        if self.state.main_finished():
            return self.state.outcome(cancel_requested=self.cancelling).phase
        return self.state.status.phase

    def _conclude(self) -> Decision:
        status = self.state.status
        if self.state.main_finished() and self.state.finally_finished():
            self._finish()
            # No pass follows the last one: every Job that can never start goes now.
            self._delete_stuck_jobs(None)
            return Decision(status=status, actions=tuple(self.driver.actions), wake_at=None)
        summary = summarize(self.state, suspended=self.suspended, now=self.now)
        transition_run(status, summary.phase)
        status.current_step = current_step_text(summary.current)
        status.wake_at = summary.wake_at
        status.message = clip(phase_message(summary), 2048)
        set_condition(status, "Succeeded", "Unknown", reason=summary.phase, message=status.message or "",
                      now=self.now)
        if summary.paused:
            set_condition(
                status, "CredentialsNeedRepair", "True", reason="AuthFailed",
                message=f"step(s) {', '.join(summary.paused)} failed to authenticate; repair Secret(s) "
                f"{', '.join(summary.paused_secrets) or '(none named)'}, then resume with: kubectl annotate "
                f"workflowrun {self.view.name} {RESUME_ANNOTATION}=\"$(date +%s)\" --overwrite", now=self.now,
            )
        elif has_condition(status, "CredentialsNeedRepair", "True"):
            set_condition(status, "CredentialsNeedRepair", "False", reason="Resumed",
                          message="the run was resumed after credential repair", now=self.now)
        self._flag_unknown_side_effects()
        wake_at = self.now if self._leaves_stuck_jobs() or self._started_children() else status.wake_at
        return Decision(status=status, actions=tuple(self.driver.actions), wake_at=wake_at)

    def _finish(self) -> None:
        status = self.state.status
        outcome = self._with_outputs(self.state.outcome(cancel_requested=self.cancelling,
                                                        stop_requested=self.stopping))
        transition_run(status, outcome.phase)
        status.finished_at = self.now
        status.wake_at = None
        status.current_step = None
        status.message = clip(outcome.message, 2048)
        set_condition(status, "Succeeded", "True" if outcome.phase == "Succeeded" else "False",
                      reason=outcome.reason, message=outcome.message, now=self.now)
        if has_condition(status, "CredentialsNeedRepair", "True"):
            set_condition(status, "CredentialsNeedRepair", "False", reason="RunFinished",
                          message="the run has finished", now=self.now)
        self._flag_unknown_side_effects()
        self.driver.event("Normal" if outcome.phase == "Succeeded" else "Warning", f"Run{outcome.phase}",
                          f"run {outcome.phase.lower()} ({outcome.reason}): {outcome.message}")

    def _with_outputs(self, outcome: Outcome) -> Outcome:
        """A succeeded run records its outputs; one whose outputs fail ends Failed, with no outputs at all."""
        declared = self.view.status.workflow_spec.outputs if self.view.status.workflow_spec else None
        if outcome.phase != "Succeeded" or not declared:
            return outcome
        outputs = evaluate_outputs(declared, self.bindings)
        if isinstance(outputs, OutputsProblem):
            return Outcome("Failed", "OutputsFailed", outputs.message)
        self.state.status.outputs = outputs
        return outcome

    def _flag_unknown_side_effects(self) -> None:
        unknown = [
            e.id for e in self.state.status.steps
            if e.phase == "Failed" and e.error_class == ErrorClass.UNKNOWN_SIDE_EFFECT
        ]
        if unknown:
            set_condition(
                self.state.status, "NeedsReconciliation", "True", reason="SideEffectUnknown",
                message=f"step(s) {', '.join(unknown)} may or may not have taken effect; check the target system "
                "(the step's idempotencyKey identifies the request) before running them again", now=self.now,
            )


def _over_in(steps: list[StepStatus], job: JobObservation) -> bool:
    """`steps` record the Job's attempt as over (a later attempt, or this one no longer Running)."""
    entry = next((e for e in steps if e.id == job.step_id), None)
    return entry is not None and (entry.attempt, entry.phase) != (job.attempt, "Running")

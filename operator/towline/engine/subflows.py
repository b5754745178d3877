"""Subflow steps: start a child run, follow it, end with its phase; cancel and suspend reach it.

A subflow step (`workflow: {name, params}`) has no Job: its one attempt is a child WorkflowRun of the
named Workflow, created by the operator (CreateChildRun), owned by this run, requested by this run's
requester. The step ends with the child's phase (Succeeded, else Failed: a child cancelled by somebody else
fails the step) and its output is the child's `status.outputs`. While the step runs, the run's
`spec.cancel` and `spec.suspend` are carried to the child (SetChildRun). How deep subflows nest is known
from the run's own trigger (`spec.trigger.parent.chain`, written only by the operator): a step that would
nest deeper than MAX_SUBFLOW_DEPTH fails without a child.

Pure: no I/O, no clock; every phase change goes through `transition_step`.
"""

from __future__ import annotations

from typing import Any

from towline.api.loops import loop_of
from towline.api.run import RetryOf, WorkflowRun, WorkflowRunSpec
from towline.api.subflows import MAX_SUBFLOW_DEPTH, subflow_chain_text
from towline.engine.actions import CreateChildRun, SetChildRun
from towline.engine.naming import child_run_name
from towline.engine.phases import transition_step
from towline.engine.rerun import params_digest
from towline.engine.steps import StepDriver
from towline.expressions import ExpressionError, render, template_expressions
from towline.text import clip
from towline_step.protocol import ErrorClass


class Subflows:
    """The subflow half of one `decide` pass."""

    def __init__(self, driver: StepDriver) -> None:
        self.driver = driver

    def chain(self) -> list[str]:
        """The Workflows of the runs above this one, the top-level run's first ([] for a top-level run)."""
        parent = self.driver.run.spec.trigger.parent
        return list(parent.chain) if self.driver.run.spec.trigger.type == "parent" and parent is not None else []

    def start(self, step_id: str) -> None:
        """Start the child run, or fail the step: past the depth limit, or params that cannot be evaluated."""
        driver = self.driver
        step = driver.state.graph.steps[step_id]
        assert step.workflow is not None
        chain = [*self.chain(), driver.run.workflow_name]
        if len(chain) > MAX_SUBFLOW_DEPTH:
            self._fail(step_id, "SubflowTooDeep", ErrorClass.VALIDATION,
                       f"subflows nest at most {MAX_SUBFLOW_DEPTH} deep; this step would start a run "
                       f"{len(chain)} deep ({subflow_chain_text(chain, step.workflow.name)}): end the chain "
                       "earlier, or call the deeper Workflow's steps directly")
            return
        try:
            params = self._params(step_id)
        except ExpressionError as error:
            driver.fail_before_start(step_id, error)
            return
        snapshot = driver.run.status.workflow_spec
        record = (snapshot.subflows or {}).get(step.workflow.name) if snapshot is not None else None
        entry = driver.state.edit(step_id)
        transition_step(entry, "Running", at=driver.now)
        entry.attempt += 1
        entry.child_run = child_run_name(driver.run.name, step_id)
        entry.error_class = entry.message = None
        retry_of = self._retry_of(step_id, entry.child_run, params)
        driver.actions.append(CreateChildRun(
            step_id=step_id, name=entry.child_run, workflow=step.workflow.name, params=params,
            requested_by=driver.run.spec.requested_by, workflow_uid=record.uid if record else None,
            chain=tuple(chain), suspend=driver.run.spec.suspend, retry_of=retry_of,
        ))
        retrying = "" if retry_of is None else (f", a retry of child run {retry_of.run} reusing "
                                                 f"{', '.join(retry_of.reuse) or 'no step'}")
        driver.event("Normal", "SubflowStarted", f"step {step_id} started child run {entry.child_run} "
                     f"of Workflow {step.workflow.name}{retrying}")

    def _retry_of(self, step_id: str, name: str, params: dict[str, Any]) -> RetryOf | None:
        """In a retry: the earlier child this step's new child retries (its Succeeded steps reused), when that
        child ended Failed or Cancelled (status.retriedChildren, written by the operator) and was passed the same
        params; None: the child starts from the start."""
        driver = self.driver
        retried = (driver.run.status.retried_children or {}).get(step_id)
        if retried is None:
            return None
        if params_digest(params) != retried.params_digest:
            driver.event("Normal", "SubflowNotRetried", f"step {step_id} starts child run {name} from the start, "
                         f"not as a retry of child run {retried.run}: the params it passes differ from that run's "
                         "(a step they bind ran again)")
            return None
        return RetryOf(run=retried.run, reuse=list(retried.reuse))

    def _params(self, step_id: str) -> dict[str, Any]:
        step = self.driver.state.graph.steps[step_id]
        assert step.workflow is not None
        sources = [source for _, source in template_expressions(step.workflow.params)]
        if not sources:
            return dict(step.workflow.params)
        rendered: dict[str, Any] = render(step.workflow.params,
                                          self.driver.bindings.context_for(sources, step_id))
        return rendered

    def observe(self, step_id: str) -> None:
        """A running subflow step: end it with its child's phase once the child ended; keep its switches in step."""
        driver = self.driver
        entry = driver.state.get(step_id)
        assert entry is not None and entry.phase == "Running" and entry.child_run is not None
        child = driver.observed.child_runs.get(step_id)
        if child is None:
            self._fail(step_id, "ChildRunMissing", ErrorClass.PERMANENT,
                       f"the child run {entry.child_run} was deleted before it ended")
            return
        if child.foreign is not None:
            self._fail(step_id, "ChildRunForeign", ErrorClass.PERMANENT,
                       f"a WorkflowRun named {child.name} exists that this run did not start ({child.foreign}); "
                       "it is not used: delete it and retry this run")
            return
        if child.phase == "Succeeded":
            driver.complete_attempt(step_id, dict(child.outputs or {}), None, child.finished_at or driver.now)
            return
        if child.phase in ("Failed", "Cancelled"):
            how = "failed" if child.phase == "Failed" else "was cancelled"
            self._fail(step_id, "ChildRunFailed" if child.phase == "Failed" else "ChildRunCancelled",
                       ErrorClass.PERMANENT, f"the child run {child.name} {how}: {child.message or child.phase}",
                       finished_at=child.finished_at)
            return
        want_suspend = driver.run.spec.suspend and not driver.run.spec.cancel
        if child.suspend != want_suspend and not child.cancel:
            driver.actions.append(SetChildRun(child.name, suspend=want_suspend))

    def _fail(self, step_id: str, reason: str, error_class: ErrorClass, message: str,
              finished_at: Any = None) -> None:
        driver = self.driver
        entry = driver.state.edit(step_id)
        if entry.phase == "Running":
            driver.fail_attempt(step_id, error_class, message, retryable=False, finished_at=finished_at)
            entry = driver.state.edit(step_id)
            entry.reason = reason
            return
        entry.error_class = error_class
        transition_step(entry, "Failed", at=driver.now, reason=reason, message=clip(message, 2048))
        driver.event("Warning", "StepFailed", f"step {step_id} could not start: {message}")
        driver.after_failure(step_id)


def child_run_errors(
    run_spec: WorkflowRunSpec, controller_uid: str | None, parent: WorkflowRun | None, workflow_uid: str | None,
    allowed: bool, *, retried_uid: str | None = None,
) -> list[str]:
    """Why a run of trigger type parent is not the child its parent's subflow step started; [] when it is.

    The API server lets only the operator (and systems the chart trusts with trigger runs) create such runs; this
    is the operator's own check that the run is the one a subflow step of its parent asked for: owned by that run,
    requested by its requester, of the Workflow the step names, at the depth the parent's chain gives, of the
    Workflow the parent recorded (`workflow_uid`, this run's Workflow's uid now) and still `allowed` as a subflow.
    A child that retries an earlier child (spec.retryOf) retries the one its parent recorded for that step
    (status.retriedChildren: that run, by uid as `retried_uid` reads now, with those steps reused), so nobody can
    pass another run, or a run created later under that child's name, off as the child it retries.
    """
    ref = run_spec.trigger.parent
    if ref is None:
        return ["spec.trigger.parent: a run of trigger type parent names its parent run; only the operator "
                "starts such runs (a subflow step's child)"]
    fix = "child runs are started only by their parent's subflow step; start a manual run instead"
    if parent is None or parent.metadata.get("uid") != ref.uid:
        return [f"spec.trigger.parent.run: run {ref.run!r} (uid {ref.uid}) does not exist in this namespace; {fix}"]
    errors = []
    if controller_uid != ref.uid:
        errors.append(f"metadata.ownerReferences: the run is not controlled by its parent run {ref.run!r}; {fix}")
    if run_spec.requested_by != parent.spec.requested_by:
        errors.append(f"spec.requestedBy: {run_spec.requested_by!r} is not the parent run's requester "
                      f"{parent.spec.requested_by!r}; {fix}")
    snapshot = parent.status.workflow_spec if parent.status is not None else None
    steps = (*snapshot.steps, *snapshot.finally_, *snapshot.compensations) if snapshot is not None else ()
    step_id = loop_of(ref.step) or ref.step
    step = next((s for s in steps if s.id == step_id), None)
    if step is None or step.workflow is None or step.workflow.name != run_spec.workflow_ref.name:
        errors.append(f"spec.trigger.parent.step: the parent run has no subflow step {ref.step!r} running Workflow "
                      f"{run_spec.workflow_ref.name!r}; {fix}")
    above = parent.spec.trigger.parent.chain if parent.spec.trigger.parent is not None else []
    if list(ref.chain) != [*above, parent.spec.workflow_ref.name]:
        errors.append(f"spec.trigger.parent.chain: {subflow_chain_text(list(ref.chain[:-1]), ref.chain[-1])} is not "
                      f"the parent run's chain; {fix}")
    if ref.workflow_uid is not None and workflow_uid is not None and ref.workflow_uid != workflow_uid:
        errors.append(f"spec.workflowRef: Workflow {run_spec.workflow_ref.name!r} was deleted and created again "
                      f"since the parent run started (uid {ref.workflow_uid}, now {workflow_uid}); retry the parent "
                      "run to run the new one")
    if run_spec.retry_of is not None:
        status = parent.status
        record = (status.retried_children or {}).get(ref.step) if status is not None else None
        if record is None or record.run != run_spec.retry_of.run or record.uid != retried_uid \
                or list(record.reuse) != list(run_spec.retry_of.reuse):
            errors.append(f"spec.retryOf: run {run_spec.retry_of.run!r} (reusing "
                          f"{', '.join(run_spec.retry_of.reuse) or 'nothing'}) is not the earlier child the parent "
                          f"run {ref.run!r} retries for step {ref.step!r}; {fix}")
    if not allowed:
        errors.append(f"spec.workflowRef: Workflow {run_spec.workflow_ref.name!r} does not allow runs as a subflow; "
                      "set spec.subflow.allowed: true in it to allow them")
    return errors

"""What `kubectl towline retry --workflow-changed` and `retry -p` ask for, checked before anything is created.

The operator decides (towline.engine.rerun: a reused step must be the same in the Workflow now, and must not read
a param the retry changes); this module asks only what it would refuse, with the same functions, so the person
sees the refusal before a run exists. Loaded by those two flags alone: it brings the resource models, which the
plugin's start leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass

from towline.api.run import WorkflowSnapshot
from towline.api.workflow import WorkflowSpec
from towline.engine.rerun import changed_params, differing_steps, reads_params
from towline.engine.start import param_problems
from towline.jsontypes import JSON
from towline.plugin.manifests import UsageError, reusable_steps


@dataclass(frozen=True)
class RetryPlan:
    reuse: list[str]
    rerun: dict[str, list[str]]
    """Succeeded steps that run again: each reads params the retry changes (or needs one that runs again: [])."""


def plan_retry(run: JSON, workflow: JSON | None, params: JSON, *, workflow_changed: bool) -> RetryPlan:
    """The steps the retry reuses, or UsageError naming what the operator would refuse."""
    name = run["metadata"]["name"]
    status = run.get("status") or {}
    workflow_name = run["spec"]["workflowRef"]["name"]
    if workflow is None:
        raise UsageError(f"workflow {workflow_name} of run {name} does not exist any more; nothing to retry under")
    old = WorkflowSnapshot.model_validate(status.get("workflowSpec") or {})
    current = WorkflowSpec.model_validate(workflow.get("spec") or {})
    generation = int(workflow["metadata"].get("generation", 0))
    reusable = reusable_steps(run)
    if workflow_changed:
        differ = differing_steps(old.steps, current.steps, reusable)
        if differ:
            raise UsageError(
                f"retry --workflow-changed: step(s) {', '.join(differ)} succeeded in run {name} but differ in "
                f"workflow {workflow_name} now (generation {generation}: definition or needs), so their outputs "
                f"cannot be reused; start a new run instead: kubectl towline resubmit {name}")
    elif generation != old.generation or (old.uid and workflow["metadata"].get("uid") != old.uid):
        raise UsageError(f"workflow {workflow_name} changed since run {name} (generation {old.generation}, now "
                         f"{generation}); add --workflow-changed to rerun the failed steps under it")
    declared = {param.name for param in current.params}
    earlier = dict(status.get("params") or {})
    supplied = {**{k: v for k, v in earlier.items() if k in declared}, **params}
    resolved, problems = param_problems(current.params, supplied)
    if problems:
        raise UsageError("; ".join(f"-p {param}: {message}" for param, message in problems))
    changed = changed_params(earlier, resolved)
    steps = {step.id: step for step in current.steps}
    reuse: list[str] = []
    rerun: dict[str, list[str]] = {}
    for step_id in reusable:  # in DAG order: a step's needs come before it
        read = reads_params(steps[step_id], changed) if step_id in steps else []
        if read or any(need not in reuse for need in steps[step_id].needs):
            rerun[step_id] = read
        else:
            reuse.append(step_id)
    return RetryPlan(reuse=reuse, rerun=rerun)

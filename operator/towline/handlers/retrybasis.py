"""What a retry that changes something runs: the params it passes and, for "fix it in git, then retry"
(spec.retryOf.workflowChanged), the Workflow as it is now. Glue: reads the Workflow's step types and subflows as
for a new run; towline.engine.rerun decides what may be reused.
"""

from __future__ import annotations

from typing import Any

from towline.api.run import WorkflowRun, WorkflowRunStatus
from towline.engine import start_run
from towline.engine.rerun import RetryBasis
from towline.engine.start import resolve_params
from towline.handlers.context import RunDeps
from towline.handlers.steptypes import catalog_of, step_types_of
from towline.handlers.subflows import subflows_of
from towline.handlers.wasmmodules import module_problems
from towline.validation import validate_workflow_manifest


async def retry_basis(deps: RunDeps, run: WorkflowRun, previous: WorkflowRunStatus,
                      workflow: dict[str, Any]) -> RetryBasis | list[str] | None:
    """None: the retry runs the finished run's copy with its params (no spec.params, no workflowChanged)."""
    retry = run.spec.retry_of
    assert retry is not None
    if not retry.workflow_changed and (not run.spec.params or run.spec.trigger.type == "parent"):
        return None
    namespace, name = run.metadata["namespace"], run.spec.workflow_ref.name
    raw_spec = workflow.get("spec") or {}
    step_types = await step_types_of(deps.api, deps.definitions, namespace, raw_spec)
    spec, errors = validate_workflow_manifest(raw_spec, catalog_of(deps.definitions, namespace, step_types))
    if spec is None or errors:
        listed = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
        return [f"Workflow {name!r} is not valid ({listed}); fix it, then retry"]
    declared = {param.name for param in spec.params}
    # The finished run's params that the Workflow still declares, the retry's own over them.
    supplied = {**{k: v for k, v in previous.params.items() if k in declared}, **run.spec.params}
    if not retry.workflow_changed:
        params, problems = resolve_params(spec.params, supplied)
        return problems or RetryBasis(params=params)
    modules = await module_problems(deps.api, namespace, raw_spec)
    if modules:
        return [f"a code.wasm module of Workflow {name!r} would be refused ({'; '.join(modules[:5])}); fix it, "
                "then retry"]
    as_new = run.spec.model_copy(update={"params": supplied, "retry_of": None})
    started = start_run(spec, int(workflow["metadata"].get("generation", 0)), as_new,
                        workflow_uid=str(workflow["metadata"].get("uid") or ""), step_types=step_types,
                        subflows=await subflows_of(deps.api, namespace, spec))
    if isinstance(started, list):
        return started
    return RetryBasis(params=started[1], snapshot=started[0])

"""What a person does to a run: cancel, stop, suspend, resume, retry from the failed step, resubmit with its params.

`kubectl towline cancel|stop|suspend|resume|retry|resubmit` and the web view's buttons call these, so each
operation has one meaning: the same patch or the same new run, sent as the person (their API client), and
the API server's RBAC and admission decide. `available` says which apply to a run as it stands; it only
decides what a page offers, never what is allowed. No resource models are loaded (the plugin starts fast).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from towline.api.runterms import RESUME_ANNOTATION, TERMINAL_RUN_PHASES
from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin import manifests, submitting

Switch = Literal["cancel", "stop", "suspend", "resume"]
SWITCHES: tuple[Switch, ...] = ("cancel", "stop", "suspend", "resume")
ACTIONS = (*SWITCHES, "retry", "resubmit")
RETRYABLE_PHASES = frozenset({"Failed", "Cancelled"})
"""Runs `retry` starts again from: one that ended without succeeding (its Succeeded steps are reused)."""


def switch_patch(run: JSON, action: Switch, now: datetime) -> JSON:
    """The merge patch of the person's switch on the run (spec.cancel, spec.stop, spec.suspend, the resume
    annotation). Cancel runs the run's finally steps and compensations; stop (argo terminate) runs none."""
    if action == "cancel":
        return {"spec": {"cancel": True}}
    if action == "stop":
        return {"spec": {"stop": True}}
    if action == "suspend":
        return {"spec": {"suspend": True}}
    # Resume lifts a suspension and, for a step paused for credential repair, asks for a retry.
    patch: JSON = {"metadata": {"annotations": {RESUME_ANNOTATION: now.strftime("%Y%m%dT%H%M%S.%fZ")}}}
    if (run.get("spec") or {}).get("suspend"):
        patch["spec"] = {"suspend": False}
    return patch


async def switch(api: KubeApi, namespace: str, run: JSON, action: Switch) -> JSON:
    """Send the switch's patch as the caller; the API server's copy of the run comes back."""
    patch = switch_patch(run, action, datetime.now(UTC))
    return await session.patch_run(api, namespace, run["metadata"]["name"], patch)


def retry_body(run: JSON, user: str) -> JSON:
    """The retry's new run (requested by `user`), or UsageError when the run has not finished."""
    phase = (run.get("status") or {}).get("phase", "Pending")
    if phase not in TERMINAL_RUN_PHASES:
        raise manifests.UsageError(f"run {run['metadata']['name']} is {phase}; retry it once it has finished "
                                   "(or cancel it first)")
    return manifests.retry_manifest(run, user)


async def retry(api: KubeApi, namespace: str, run: JSON, user: str, *, workflow_changed: bool = False,
                params: JSON | None = None) -> tuple[JSON, list[str]]:
    """Create the retry as the caller: the new run and the steps it reuses. `workflow_changed`: under the
    Workflow as it is now ("fix it in git, then retry"); `params`: over the run's own. Either is checked here as
    the operator would (towline.plugin.retryplan) before anything is created; the operator decides again."""
    body = retry_body(run, user)
    if workflow_changed or params:
        from towline.plugin.retryplan import plan_retry  # noqa: PLC0415 - these flags alone load the models

        workflow = await session.get_workflow(api, namespace, run["spec"]["workflowRef"]["name"])
        plan = plan_retry(run, workflow, params or {}, workflow_changed=workflow_changed)
        body["spec"]["retryOf"]["reuse"] = plan.reuse
        if workflow_changed:
            body["spec"]["retryOf"]["workflowChanged"] = True
        if params:
            body["spec"]["params"] = params
    created = await session.create_run(api, namespace, body)
    return created, list(body["spec"]["retryOf"]["reuse"])


async def resubmit(api: KubeApi, namespace: str, run: JSON, user: str) -> JSON:
    """A new manual run of the run's Workflow with its params, requested by the caller."""
    return await session.create_run(api, namespace, submitting.resubmit_manifest(run, user))


def _needs_credential_repair(run: JSON) -> bool:
    conditions = (run.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "CredentialsNeedRepair" and c.get("status") == "True" for c in conditions)


def available(run: JSON) -> list[str]:
    """The operations that apply to the run as it stands, in ACTIONS order (what a page offers)."""
    spec, status = run.get("spec") or {}, run.get("status") or {}
    phase = status.get("phase", "Pending")
    offered: list[str] = []
    if phase not in TERMINAL_RUN_PHASES:
        if not spec.get("cancel") and not spec.get("stop"):
            offered.append("cancel")
        if not spec.get("stop"):
            offered.append("stop")  # also once cancelled: its finally steps may be what takes too long
        if not spec.get("suspend") and not spec.get("cancel") and not spec.get("stop"):
            offered.append("suspend")
        if spec.get("suspend") or _needs_credential_repair(run):
            offered.append("resume")
    elif phase in RETRYABLE_PHASES and status.get("workflowSpec") is not None:
        offered.append("retry")
    if (spec.get("workflowRef") or {}).get("name"):
        offered.append("resubmit")
    return offered

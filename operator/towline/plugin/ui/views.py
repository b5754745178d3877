"""What the web view shows of each object: plain JSON documents built from API objects.

Pure functions. Each view copies named fields only, so a field added to an
object later does not reach the page unless it is added here. A run's page is
its display model (towline.plugin.runtree), the one the CLI draws too. Nothing
here reads a Secret; a step's credentials appear as the Secret names it mounts.
"""

from __future__ import annotations

from dataclasses import asdict

import yaml

from towline.jsontypes import JSON
from towline.plugin.manifests import clean_workflow
from towline.plugin.runtree import RunFacts, RunTree, StepNode, run_facts, step_nodes
from towline.plugin.workflowviews import TriggerShown, workflow_shown


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def run_summary(run: JSON) -> JSON:
    """One row of the runs list."""
    return _summary(run_facts(run))


def _summary(facts: RunFacts) -> JSON:
    return {
        "name": facts.name,
        "workflow": facts.workflow,
        "phase": facts.phase,
        "currentStep": facts.current_step,
        "requestedBy": facts.requested_by,
        "trigger": facts.trigger.type,
        "created": facts.created,
        "startedAt": facts.started_at,
        "finishedAt": facts.finished_at,
    }


def step_view(node: StepNode) -> JSON:
    """One node of the run page's graph, with its record for the step panel."""
    return {
        "id": node.id,
        "section": node.section,
        "kind": node.kind,
        "label": node.label,
        "action": node.action,
        "gate": node.gate,
        "gateFor": node.gate_for,
        "needs": list(node.needs),
        "compensates": list(node.compensates),
        "when": node.when,
        "inputs": dict(node.inputs),
        "credentials": list(node.credentials),
        "phase": node.phase or "Pending",
        "reason": node.reason,
        "attempt": node.attempt,
        "jobName": node.job_name,
        "startedAt": node.started_at,
        "finishedAt": node.finished_at,
        "retryAt": node.retry_at,
        "errorClass": node.error_class,
        "message": node.message,
        "output": node.output,
        "approvalName": node.approval_name,
        "childRun": node.child_run,
        "decision": node.decision,
        "decidedBy": node.decided_by,
        "waitingForDecision": node.waiting_for_decision,
        "history": [
            {"attempt": record.number, "jobName": record.job_name, "startedAt": record.started_at,
             "finishedAt": record.finished_at, "errorClass": record.error_class, "message": record.message,
             "image": record.image}
            for record in node.history
        ],
        "forEach": node.for_each,
        "loop": None if node.loop is None else {**asdict(node.loop), "text": node.loop.text},
        "instances": [step_view(instance) for instance in node.instances],
    }


def run_detail(tree: RunTree) -> JSON:
    """The run page: the display model's nodes (state, edges from `needs`, each step's record)."""
    facts = tree.facts
    return {
        **_summary(facts),
        "params": dict(facts.params),
        "outputs": dict(facts.outputs) if facts.outputs is not None else None,
        "message": facts.message,
        "cancel": facts.cancel,
        "suspend": facts.suspend,
        "archived": tree.archived,
        "steps": [step_view(node) for node in tree.nodes],
    }


def approval_view(approval: JSON) -> JSON:
    spec, status = approval.get("spec") or {}, approval.get("status") or {}
    return {
        "name": _meta(approval).get("name"),
        "run": spec.get("runName"),
        "workflow": spec.get("workflowName"),
        "step": spec.get("step"),
        "message": spec.get("message", ""),
        "messageFromInputs": bool(spec.get("messageFromInputs")),
        "approvers": spec.get("approvers") or {},
        "fourEyes": bool(spec.get("fourEyes")),
        "requestedBy": spec.get("requestedBy"),
        "expiresAt": spec.get("expiresAt"),
        "decision": spec.get("decision"),
        "decidedBy": spec.get("decidedBy"),
        "reason": spec.get("reason"),
        "phase": status.get("phase", "Pending"),
        "created": _meta(approval).get("creationTimestamp"),
    }


def _condition(obj: JSON, kind: str) -> JSON:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return {"status": condition.get("status"), "reason": condition.get("reason"),
                    "message": condition.get("message")}
    return {"status": "Unknown", "reason": None, "message": None}


def trigger_view(trigger: TriggerShown, webhook_url: str | None = None) -> JSON:
    """A trigger as `kubectl towline workflows show` lists it (a webhook's path at the ingress, a schedule's
    next and last slot); with `webhook_url` (the webhook ingress's public origin, `ui.webhookUrl`), a webhook's
    `url` is the address senders post to."""
    return {
        "name": trigger.name, "type": trigger.type, "detail": trigger.detail, "cron": trigger.cron,
        "timeZone": trigger.time_zone, "concurrencyPolicy": trigger.concurrency_policy,
        "nextScheduleTime": trigger.next_schedule_time, "lastScheduleTime": trigger.last_schedule_time,
        "scheme": trigger.scheme, "path": trigger.path,
        "url": f"{webhook_url.rstrip('/')}{trigger.path}" if webhook_url and trigger.path else None,
    }


def workflow_summary(workflow: JSON, webhook_url: str | None = None) -> JSON:
    spec, status = workflow.get("spec") or {}, workflow.get("status") or {}
    shown = workflow_shown(workflow)
    return {
        "name": shown.name,
        "ready": _condition(workflow, "Ready"),
        "suspend": shown.suspended,
        "triggers": [trigger_view(trigger, webhook_url) for trigger in shown.triggers],
        "nextScheduleTime": shown.next_schedule_time,
        "lastRun": status.get("lastRun"),
        "steps": len(spec.get("steps") or []) + len(spec.get("finally") or []),
    }


def workflow_detail(workflow: JSON, runs: list[JSON], webhook_url: str | None = None) -> JSON:
    """A workflow's page: `workflows show`'s model (params, triggers, schedules; each webhook's URL at
    `webhook_url`, when the view knows it), its steps as the graph the run page draws, its definition as the YAML
    one would commit, its runs."""
    shown = workflow_shown(workflow)
    return {
        **workflow_summary(workflow, webhook_url),
        "namespace": shown.namespace,
        "readyText": shown.ready_message,
        "params": [{"name": p.name, "type": p.type, "required": p.required, "hasDefault": p.has_default,
                    "default": p.default, "description": p.description} for p in shown.params],
        "graph": [step_view(node) for node in step_nodes(workflow.get("spec") or {})],
        "yaml": yaml.safe_dump(clean_workflow(workflow), sort_keys=False),
        "validationErrors": (workflow.get("status") or {}).get("validationErrors") or [],
        "runs": [run_summary(run) for run in newest_first(runs)],
    }


def newest_first(objects: list[JSON]) -> list[JSON]:
    return sorted(objects, key=lambda o: (_meta(o).get("creationTimestamp") or "", _meta(o).get("name") or ""),
                  reverse=True)

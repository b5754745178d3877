"""What the web view shows of each object: plain JSON documents built from API objects.

Pure functions. Each view copies named fields only, so a field added to an
object later does not reach the page unless it is added here. Nothing here
reads a Secret; a step's credentials appear as the Secret names it mounts.
"""

from __future__ import annotations

from typing import Any

import yaml

from towline.plugin.manifests import clean_workflow

JSON = dict[str, Any]


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def run_summary(run: JSON) -> JSON:
    """One row of the runs list."""
    spec, status = run.get("spec") or {}, run.get("status") or {}
    return {
        "name": _meta(run).get("name"),
        "workflow": (spec.get("workflowRef") or {}).get("name"),
        "phase": status.get("phase", "Pending"),
        "currentStep": status.get("currentStep"),
        "requestedBy": spec.get("requestedBy"),
        "trigger": (spec.get("trigger") or {}).get("type", "manual"),
        "created": _meta(run).get("creationTimestamp"),
        "startedAt": status.get("startedAt"),
        "finishedAt": status.get("finishedAt"),
    }


def _step_definitions(spec: JSON) -> list[JSON]:
    return [*(spec.get("steps") or []), *({**s, "finally": True} for s in spec.get("finally") or [])]


def _kind_of(step: JSON) -> str:
    for key in ("action", "uses", "approval", "wait", "code"):
        if key in step:
            return str(step[key]) if key in {"action", "uses"} else key
    return "step"


def run_detail(run: JSON) -> JSON:
    """The run page: the DAG (nodes with their state, edges from `needs`) and each step's record."""
    status = run.get("status") or {}
    states = {entry["id"]: entry for entry in status.get("steps") or [] if "id" in entry}
    definitions = _step_definitions(status.get("workflowSpec") or {})
    steps = []
    for step in definitions:
        state = states.get(step["id"], {})
        steps.append({
            "id": step["id"],
            "kind": _kind_of(step),
            "needs": list(step.get("needs") or []),
            "finally": bool(step.get("finally")),
            "when": step.get("when"),
            "inputs": step.get("with"),
            "credentials": sorted((step.get("credentials") or {}).values()),
            "phase": state.get("phase", "Pending"),
            "reason": state.get("reason"),
            "attempt": state.get("attempt", 0),
            "jobName": state.get("jobName"),
            "startedAt": state.get("startedAt"),
            "finishedAt": state.get("finishedAt"),
            "retryAt": state.get("retryAt"),
            "errorClass": state.get("errorClass"),
            "message": state.get("message"),
            "output": state.get("output"),
            "approvalName": state.get("approvalName"),
            "decidedBy": state.get("decidedBy"),
            "history": [
                {key: record.get(key) for key in ("attempt", "jobName", "startedAt", "finishedAt", "errorClass",
                                                  "message", "image")}
                for record in state.get("history") or []
            ],
        })
    return {
        **run_summary(run),
        "params": status.get("params") or (run.get("spec") or {}).get("params") or {},
        "message": status.get("message"),
        "cancel": bool((run.get("spec") or {}).get("cancel")),
        "suspend": bool((run.get("spec") or {}).get("suspend")),
        "steps": steps,
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


def _triggers(spec: JSON) -> list[JSON]:
    found = [{"name": "manual", "type": "manual", "detail": ""}]
    for trigger in spec.get("triggers") or []:
        if "schedule" in trigger:
            schedule = trigger["schedule"]
            detail = f"{schedule.get('cron')} ({schedule.get('timeZone', 'UTC')})"
            found.append({"name": trigger.get("name"), "type": "schedule", "detail": detail})
        elif "webhook" in trigger:
            scheme = ((trigger["webhook"].get("verify") or {}).get("scheme")) or "unsigned"
            found.append({"name": trigger.get("name"), "type": "webhook", "detail": scheme})
    return found


def workflow_summary(workflow: JSON) -> JSON:
    spec, status = workflow.get("spec") or {}, workflow.get("status") or {}
    return {
        "name": _meta(workflow).get("name"),
        "ready": _condition(workflow, "Ready"),
        "suspend": bool(spec.get("suspend")),
        "triggers": _triggers(spec),
        "nextScheduleTime": status.get("nextScheduleTime"),
        "lastRun": status.get("lastRun"),
        "steps": len(spec.get("steps") or []) + len(spec.get("finally") or []),
    }


def workflow_detail(workflow: JSON, runs: list[JSON]) -> JSON:
    """A workflow's page: its summary, its definition as the YAML one would commit, its runs."""
    return {
        **workflow_summary(workflow),
        "yaml": yaml.safe_dump(clean_workflow(workflow), sort_keys=False),
        "validationErrors": (workflow.get("status") or {}).get("validationErrors") or [],
        "runs": [run_summary(run) for run in newest_first(runs)],
    }


def newest_first(objects: list[JSON]) -> list[JSON]:
    return sorted(objects, key=lambda o: (_meta(o).get("creationTimestamp") or "", _meta(o).get("name") or ""),
                  reverse=True)

"""`kubectl towline describe RUN`: everything recorded about one run, for a person. Pure.

Reads only what the API server returned: the run (spec and the operator's
status), its Approvals and its Events. Step inputs are the step's `with` as the
run's snapshot holds them (bindings unresolved, credentials by Secret name);
outputs are the step results the operator recorded, which the runner redacted
before they left the pod. No Secret is read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import yaml

from towline.plugin.render import age, duration, ordered_step_ids, trigger_text

JSON = dict[str, Any]
MAX_VALUE_LINES = 30
"""A long input or output is cut here; `-o yaml` prints the whole run."""


def describe(run: JSON, approvals: list[JSON], events: list[JSON], now: datetime) -> str:
    meta, spec, status = run["metadata"], run.get("spec") or {}, run.get("status") or {}
    snapshot = status.get("workflowSpec") or {}
    trigger = spec.get("trigger") or {}
    lines = [
        f"Name:          {meta['name']}",
        f"Namespace:     {meta.get('namespace', '')}",
        f"Workflow:      {(spec.get('workflowRef') or {}).get('name', '')}"
        + (f" (generation {snapshot['generation']})" if "generation" in snapshot else ""),
        f"Phase:         {status.get('phase', 'Pending')}",
    ]
    if status.get("message"):
        lines.append(f"Message:       {_flat(status['message'])}")
    lines.append(f"Requested by:  {spec.get('requestedBy') or '(nobody: started by its trigger)'}")
    lines.append(f"Trigger:       {trigger_text({k: v for k, v in trigger.items() if k != 'deliveryId'})}")
    if trigger.get("deliveryId"):
        lines.append(f"Delivery id:   {trigger['deliveryId']}")
    if trigger.get("scheduledTime"):
        lines.append(f"Scheduled for: {trigger['scheduledTime']}")
    if spec.get("retryOf"):
        reused = ", ".join(spec["retryOf"].get("reuse") or []) or "nothing"
        lines.append(f"Retry of:      {spec['retryOf']['run']} (reusing {reused})")
    lines.append(f"Created:       {meta.get('creationTimestamp', '')} ({age(meta.get('creationTimestamp'), now)} ago)")
    if status.get("startedAt"):
        took = duration(status.get("startedAt"), status.get("finishedAt"), now)
        lines.append(f"Started:       {status['startedAt']}")
        lines.append(f"Finished:      {status['finishedAt']} (took {took})" if status.get("finishedAt")
                     else f"Running for:   {took}")
    if spec.get("cancel") or spec.get("suspend"):
        lines.append("Switches:      " + ", ".join(k for k in ("cancel", "suspend") if spec.get(k)))
    lines += _block("Params:", status.get("params") or spec.get("params") or {}, "", empty="<none>")
    lines += _steps(run, now)
    lines += _approvals(approvals)
    lines += _events(events, now)
    return "\n".join(lines)


def _steps(run: JSON, now: datetime) -> list[str]:
    status = run.get("status") or {}
    declared = {step["id"]: step for key in ("steps", "finally", "compensations")
                for step in (status.get("workflowSpec") or {}).get(key) or []}
    entries = {entry["id"]: entry for entry in status.get("steps") or []}
    order = ordered_step_ids(run) or [("steps", step_id) for step_id in entries]
    if not order:
        return ["Steps:         (none yet: the run has not started)"]
    lines = ["Steps:"]
    for section, step_id in order:
        step, entry = declared.get(step_id, {}), entries.get(step_id, {})
        kind = step.get("action") or ("approval" if step.get("approval") else "wait" if step.get("wait") else "")
        where = "" if section == "steps" else f" [{section}]"
        gate = f" (gate for {entry['gateFor']})" if entry.get("gateFor") else ""
        lines.append(f"  {step_id}{where}{gate}  {kind}  {entry.get('phase', 'Pending')}".rstrip())
        facts = []
        if entry.get("attempt"):
            facts.append(f"attempt {entry['attempt']}")
        took = duration(entry.get("startedAt"), entry.get("finishedAt"), now)
        if took:
            facts.append(took)
        if entry.get("errorClass"):
            facts.append(f"error class {entry['errorClass']}")
        if entry.get("reason"):
            facts.append(f"reason {entry['reason']}")
        if facts:
            lines.append("    " + ", ".join(facts))
        if entry.get("message"):
            lines.append(f"    Message: {_flat(entry['message'])}")
        if entry.get("approvalName"):
            decided = f", decided by {entry['decidedBy']}" if entry.get("decidedBy") else ""
            lines.append(f"    Approval: {entry['approvalName']}{decided}")
        if entry.get("credentialsUsed"):
            lines.append(f"    Credentials (Secret names): {', '.join(entry['credentialsUsed'])}")
        lines += _block("Inputs:", step.get("with") or {}, "    ")
        if "output" in entry and entry["output"] is not None:
            lines += _block("Output:", entry["output"], "    ")
        for record in entry.get("history") or []:
            lines.append("    " + _attempt(record, now))
    return lines


def _attempt(record: JSON, now: datetime) -> str:
    parts = [f"Attempt {record.get('attempt', '?')}:"]
    took = duration(record.get("startedAt"), record.get("finishedAt"), now)
    if took:
        parts.append(took)
    if record.get("errorClass"):
        parts.append(f"error class {record['errorClass']}")
    if record.get("jobName"):
        parts.append(f"job {record['jobName']}")
    if record.get("message"):
        parts.append(f"- {_flat(record['message'])}")
    return " ".join(parts)


def _approvals(approvals: list[JSON]) -> list[str]:
    if not approvals:
        return ["Approvals:     <none>"]
    lines = ["Approvals:"]
    for approval in approvals:
        spec, status = approval.get("spec") or {}, approval.get("status") or {}
        name, step = approval["metadata"]["name"], spec.get("step", "?")
        lines.append(f"  {name}  step {step}  {status.get('phase', 'Pending')}")
        approvers = spec.get("approvers") or {}
        who = ", ".join([*(approvers.get("users") or []), *(f"group {g}" for g in approvers.get("groups") or [])])
        if who:
            lines.append(f"    Approvers: {who}" + (" (four eyes: not the requester)" if spec.get("fourEyes") else ""))
        if spec.get("message"):
            lines.append(f"    Asks: {_flat(spec['message'])}")
        if spec.get("decision"):
            when = f" at {status['decidedAt']}" if status.get("decidedAt") else ""
            lines.append(f"    {spec['decision']} by {spec.get('decidedBy', '?')}{when}")
            if spec.get("reason"):
                lines.append(f"    Why: {_flat(spec['reason'])}")
        elif spec.get("expiresAt"):
            lines.append(f"    Undecided; expires {spec['expiresAt']}")
    return lines


def _events(events: list[JSON], now: datetime) -> list[str]:
    if not events:
        return ["Events:        <none>"]
    rows = [["TYPE", "REASON", "AGE", "FROM", "MESSAGE"]]
    for event in events:
        when = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
        count = int(event.get("count") or 1)
        rows.append([
            str(event.get("type") or ""), str(event.get("reason") or ""),
            age(when, now) + (f" (x{count})" if count > 1 else ""),
            str((event.get("source") or {}).get("component") or event.get("reportingComponent") or ""),
            _flat(str(event.get("message") or "")),
        ])
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return ["Events:", *("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
                         + "  " + row[4] for row in rows)]


def _block(title: str, value: Any, indent: str, *, empty: str | None = None) -> list[str]:
    """A title and the value as YAML under it, indented; long values are cut. Nothing (or `empty`) if empty."""
    if value in ({}, [], None, ""):
        return [] if empty is None else [f"{indent}{title.ljust(14)} {empty}".rstrip()]
    text = yaml.safe_dump(value, sort_keys=True, default_flow_style=False, width=100).rstrip("\n").splitlines()
    shown = text[:MAX_VALUE_LINES]
    if len(text) > MAX_VALUE_LINES:
        shown.append(f"... ({len(text) - MAX_VALUE_LINES} more lines; `-o yaml` shows everything)")
    return [f"{indent}{title}", *(f"{indent}  {line}" for line in shown)]


def _flat(text: str) -> str:
    return " ".join(str(text).split())

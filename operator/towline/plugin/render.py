"""Text a person reads: the runs table and a run's step tree. Pure: JSON in, text out."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from towline.text import elapsed
from towline_connectors.wire import parse_rfc3339

JSON = dict[str, Any]


def duration(start: str | None, end: str | None, now: datetime) -> str:
    """`1.2s`, `3m04s`, `2h05m`; empty before the start."""
    if not start:
        return ""
    return elapsed(((parse_rfc3339(end) if end else now) - parse_rfc3339(start)).total_seconds())


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip()
             for row in (header, *rows)]
    return "\n".join(lines)


def runs_table(runs: list[JSON], now: datetime, *, wide: bool = False, all_namespaces: bool = False) -> str:
    """One line a run, oldest first. `wide` adds age, trigger (and delivery id) and message;
    `all_namespaces` a NAMESPACE column first, as `kubectl get -A` does."""
    if not runs:
        return "No runs."
    rows = []
    for run in sorted(runs, key=lambda r: r["metadata"].get("creationTimestamp") or ""):
        spec, status = run.get("spec") or {}, run.get("status") or {}
        retry = (spec.get("retryOf") or {}).get("run")
        row = [
            run["metadata"]["name"],
            spec.get("workflowRef", {}).get("name", ""),
            status.get("phase", "Pending"),
            status.get("currentStep") or "",
            duration(status.get("startedAt"), status.get("finishedAt"), now),
            spec.get("requestedBy") or (spec.get("trigger") or {}).get("type", ""),
            f"retry of {retry}" if retry else "",
        ]
        if wide:
            row += [age(run["metadata"].get("creationTimestamp"), now), trigger_text(spec.get("trigger") or {}),
                    " ".join(str(status.get("message") or "").split())]
        rows.append([run["metadata"].get("namespace", ""), *row] if all_namespaces else row)
    header = ["NAME", "WORKFLOW", "PHASE", "STEP", "DURATION", "REQUESTED BY", "NOTE"]
    if wide:
        header += ["AGE", "TRIGGER", "MESSAGE"]
    return table(["NAMESPACE", *header] if all_namespaces else header, rows)


def age(created: str | None, now: datetime) -> str:
    """`45s`, `12m`, `3h`, `2d`: kubectl's AGE column, coarsely."""
    if not created:
        return ""
    return span((now - parse_rfc3339(created)).total_seconds())


def span(seconds: float) -> str:
    """A length of time as the AGE column says it (also how long until an approval expires)."""
    whole = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size * (2 if unit != "m" else 1):
            return f"{whole // size}{unit}"
    return f"{max(whole, 0)}s"


def trigger_text(trigger: JSON) -> str:
    """`manual`, `schedule/nightly`, `webhook/push (delivery 72d3...)`."""
    text = str(trigger.get("type") or "manual")
    if trigger.get("name"):
        text += f"/{trigger['name']}"
    if trigger.get("deliveryId"):
        text += f" (delivery {trigger['deliveryId']})"
    return text


def ordered_step_ids(run: JSON) -> list[tuple[str, str]]:
    """(section, step id) in the order a person reads them: main DAG with its gates, compensations, finally."""
    status = run.get("status") or {}
    snapshot = status.get("workflowSpec") or {}
    listed = [entry["id"] for entry in status.get("steps") or []]
    gates = {entry["gateFor"]: entry["id"] for entry in status.get("steps") or [] if entry.get("gateFor")}
    order: list[tuple[str, str]] = []
    for step in snapshot.get("steps") or []:
        if step["id"] in gates:
            order.append(("steps", gates[step["id"]]))
        order.append(("steps", step["id"]))
    compensations = {step["id"] for step in snapshot.get("compensations") or []}
    order.extend(("compensations", step_id) for step_id in listed if step_id in compensations)
    order.extend(("finally", step["id"]) for step in snapshot.get("finally") or [])
    return order


def step_line(entry: JSON, now: datetime, *, wide: bool = False) -> str:
    parts = [entry.get("phase", "Pending")]
    if wide and entry.get("jobName"):
        parts.append(f"job {entry['jobName']}")
    attempts = int(entry.get("attempt") or 0)
    if attempts:
        parts.append(f"attempts {attempts}")
    took = duration(entry.get("startedAt"), entry.get("finishedAt"), now)
    if took:
        parts.append(took)
    if entry.get("errorClass"):
        parts.append(f"error {entry['errorClass']}")
    if entry.get("decidedBy"):
        verb = "rejected" if entry.get("reason") == "Rejected" else "approved"
        parts.append(f"{verb} by {entry['decidedBy']}")
    elif entry.get("approvalName") and entry.get("phase") == "Running":
        parts.append(f"waiting for approval {entry['approvalName']}")
    if entry.get("reason") and not entry.get("decidedBy") and entry.get("reason") != entry.get("phase"):
        parts.append(f"({entry['reason']})")
    if entry.get("message") and entry.get("phase") not in ("Succeeded",):
        parts.append(f"- {entry['message']}")
    elif entry.get("reason") == "Reused":
        parts.append(f"- {entry.get('message', '')}")
    return "  ".join(parts)


def status_tree(run: JSON, now: datetime, *, wide: bool = False) -> str:
    """The run's steps as a tree; `wide` adds each step's current Job."""
    meta, spec, status = run["metadata"], run.get("spec") or {}, run.get("status") or {}
    workflow = spec.get("workflowRef", {}).get("name", "")
    lines = [f"Run {meta['name']}  workflow {workflow}  {status.get('phase', 'Pending')}"]
    if spec.get("requestedBy"):
        lines.append(f"Requested by {spec['requestedBy']}")
    if spec.get("retryOf"):
        reused = ", ".join(spec["retryOf"].get("reuse") or []) or "nothing"
        lines.append(f"Retry of {spec['retryOf']['run']} (reusing {reused})")
    took = duration(status.get("startedAt"), status.get("finishedAt"), now)
    if took:
        lines.append(f"Duration {took}")
    if status.get("message"):
        lines.append(f"Message {status['message']}")
    entries = {entry["id"]: entry for entry in status.get("steps") or []}
    order = ordered_step_ids(run)
    width = max((len(step_id) for _, step_id in order), default=0)
    section = ""
    for index, (where, step_id) in enumerate(order):
        if where != section:
            section = where
            lines.append(f"{where}:")
        last = index + 1 == len(order) or order[index + 1][0] != where
        branch = "└─" if last else "├─"
        entry = entries.get(step_id, {"id": step_id})
        lines.append(f"  {branch} {step_id.ljust(width)}  {step_line(entry, now, wide=wide)}")
    return "\n".join(lines)

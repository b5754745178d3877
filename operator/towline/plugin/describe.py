"""`kubectl towline describe RUN`: everything recorded about one run, for a person. Pure.

Reads only what the API server returned: the run (its display model, runtree),
its Approvals and its Events. Step inputs are the step's `with` as the
run's snapshot holds them (bindings unresolved, credentials by Secret name);
outputs are the step results the operator recorded, which the runner redacted
before they left the pod. No Secret is read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import yaml

from towline.jsontypes import JSON
from towline.plugin.render import age, decision_text, duration, present, retry_text, trigger_text
from towline.plugin.runtree import Attempt, RunTree, StepNode

MAX_VALUE_LINES = 30
"""A long input or output is cut here; `-o yaml` prints the whole run."""


def describe(tree: RunTree, approvals: list[JSON], events: list[JSON], now: datetime) -> str:
    facts = tree.facts
    trigger = facts.trigger
    lines = [
        f"Name:          {facts.name}",
        f"Namespace:     {facts.namespace}",
        f"Workflow:      {facts.workflow}"
        + (f" (generation {facts.generation})" if facts.generation is not None else ""),
        f"Phase:         {facts.phase}",
    ]
    if facts.message:
        lines.append(f"Message:       {_flat(facts.message)}")
    lines.append(f"Requested by:  {facts.requested_by or '(nobody: started by its trigger)'}")
    lines.append(f"Trigger:       {trigger_text(trigger, delivery=False)}")
    lines += present(f"Delivery id:   {trigger.delivery_id}" if trigger.delivery_id else "",
                     f"Scheduled for: {trigger.scheduled_time}" if trigger.scheduled_time else "",
                     f"Retry of:      {retry_text(facts.retry_of)}" if facts.retry_of else "")
    lines.append(f"Created:       {facts.created or ''} ({age(facts.created, now)} ago)")
    if facts.started_at:
        took = duration(facts.started_at, facts.finished_at, now)
        lines.append(f"Started:       {facts.started_at}")
        lines.append(f"Finished:      {facts.finished_at} (took {took})" if facts.finished_at
                     else f"Running for:   {took}")
    if facts.cancel or facts.suspend:
        lines.append("Switches:      " + ", ".join(k for k, on in (("cancel", facts.cancel),
                                                                    ("suspend", facts.suspend)) if on))
    lines += _block("Params:", dict(facts.params), "", empty="<none>")
    if facts.outputs is not None:
        lines += _block("Outputs:", dict(facts.outputs), "", empty="<none>")
    lines += _steps(tree, now)
    lines += _approvals(approvals)
    lines += _events(events, now)
    return "\n".join(lines)


def _steps(tree: RunTree, now: datetime) -> list[str]:
    if not tree.nodes:
        return ["Steps:         (none yet: the run has not started)"]
    lines = ["Steps:"]
    for node in tree.nodes:
        where = "" if node.section == "steps" else f" [{node.section}]"
        gate = f" (gate for {node.gate_for})" if node.gate_for else ""
        lines.append(f"  {node.id}{where}{gate}  {node.label}  {node.phase or 'Pending'}".rstrip())
        facts = [f"attempt {node.attempt}" if node.attempt else "", duration(node.started_at, node.finished_at, now),
                 f"error class {node.error_class}" if node.error_class else "",
                 f"reason {node.reason}" if node.reason else ""]
        if any(facts):
            lines.append("    " + ", ".join(fact for fact in facts if fact))
        decided = f", {decision_text(node)}" if node.decision else ""
        lines += present(
            f"    Compensates: {', '.join(node.compensates)} (their onFailure)" if node.compensates else "",
            f"    Message: {_flat(node.message)}" if node.message else "",
            f"    Child run: {node.child_run} (kubectl towline describe {node.child_run})" if node.child_run else "",
            f"    Approval: {node.approval_name}{decided}" if node.approval_name else "",
            f"    Credentials (Secret names): {', '.join(node.credentials_used)}" if node.credentials_used else "")
        lines += _block("Inputs:", dict(node.inputs), "    ")
        if node.output is not None:
            lines += _block("Output:", node.output, "    ")
        lines += ["    " + _attempt(record, now) for record in node.history]
        lines += _instances(node, now)
    return lines


def _instances(node: StepNode, now: datetime) -> list[str]:
    """A loop's counts and each listed instance in a line: phase, attempts, time, error, decision, message."""
    if node.loop is None:
        return []
    lines = [f"    Instances: {node.loop.text}"]
    for instance in node.instances:
        gate = f" (gate for {instance.gate_for})" if instance.gate_for else ""
        facts = [instance.phase or "Pending", f"attempt {instance.attempt}" if instance.attempt else "",
                 duration(instance.started_at, instance.finished_at, now),
                 f"error class {instance.error_class}" if instance.error_class else "",
                 f"reason {instance.reason}" if instance.reason and instance.reason != instance.phase else "",
                 decision_text(instance),
                 f"approval {instance.approval_name}" if instance.waiting_for_decision else "",
                 f"- {_flat(instance.message)}" if instance.message and instance.phase != "Succeeded" else ""]
        lines.append(f"      {instance.id}{gate}  " + "  ".join(fact for fact in facts if fact))
    return lines


def _attempt(record: Attempt, now: datetime) -> str:
    parts = [f"Attempt {record.number if record.number is not None else '?'}:",
             duration(record.started_at, record.finished_at, now),
             f"error class {record.error_class}" if record.error_class else "",
             f"job {record.job_name}" if record.job_name else "",
             f"- {_flat(record.message)}" if record.message else ""]
    return " ".join(part for part in parts if part)


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

"""Text a person reads: the runs table and a run's step tree, rendered from the display model (runtree). Pure."""

from __future__ import annotations

import json
from datetime import datetime

from towline.jsontypes import JSON
from towline.plugin.runtree import SECTIONS, RetryOf, RunTree, StepNode, Trigger, run_facts
from towline.text import elapsed
from towline_connectors.wire import parse_rfc3339


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
    for facts in sorted((run_facts(run) for run in runs), key=lambda f: f.created or ""):
        row = [
            facts.name, facts.workflow, facts.phase, facts.current_step or "",
            duration(facts.started_at, facts.finished_at, now),
            facts.requested_by or facts.trigger.type,
            f"retry of {facts.retry_of.run}" if facts.retry_of else "",
        ]
        if wide:
            row += [age(facts.created, now), trigger_text(facts.trigger), " ".join((facts.message or "").split())]
        rows.append([facts.namespace, *row] if all_namespaces else row)
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


def present(*lines: str) -> list[str]:
    """The lines that say something: a renderer writes each optional line as its text or "" and keeps these."""
    return [line for line in lines if line]


def trigger_text(trigger: Trigger, *, delivery: bool = True) -> str:
    """`manual`, `schedule/nightly`, `webhook/push (delivery 72d3...)`."""
    text = trigger.type
    if trigger.name:
        text += f"/{trigger.name}"
    if delivery and trigger.delivery_id:
        text += f" (delivery {trigger.delivery_id})"
    return text


def retry_text(retry_of: RetryOf) -> str:
    """`nightly-x7k2p (reusing build, test)`: the run a retry starts again from and the steps it keeps."""
    return f"{retry_of.run} (reusing {', '.join(retry_of.reuse) or 'nothing'})"


def decision_text(node: StepNode) -> str:
    """`approved by bob`, `rejected by bob`; empty while undecided."""
    return f"{node.decision.lower()} by {node.decided_by}" if node.decision else ""


def step_line(node: StepNode, now: datetime, *, wide: bool = False) -> str:
    waiting = f"waiting for approval {node.approval_name}" if node.waiting_for_decision else ""
    reused = f"- {node.message or ''}" if node.reason == "Reused" else ""
    parts = [node.phase or "Pending",
             f"job {node.job_name}" if wide and node.job_name else "",
             f"child run {node.child_run}" if node.child_run else "",
             f"attempts {node.attempt}" if node.attempt else "",
             duration(node.started_at, node.finished_at, now),
             f"error {node.error_class}" if node.error_class else "",
             decision_text(node) or waiting,
             node.loop.text if node.loop is not None else "",
             f"({node.reason})" if node.reason and not node.decided_by and node.reason != node.phase else "",
             f"- {node.message}" if node.message and node.phase != "Succeeded" else reused]
    return "  ".join(part for part in parts if part)


def status_tree(tree: RunTree, now: datetime, *, wide: bool = False) -> str:
    """The run's steps as a tree, by section; `wide` adds each step's current Job."""
    facts = tree.facts
    took = duration(facts.started_at, facts.finished_at, now)
    lines = present(f"Run {facts.name}  workflow {facts.workflow}  {facts.phase}",
                    f"Requested by {facts.requested_by}" if facts.requested_by else "",
                    f"Retry of {retry_text(facts.retry_of)}" if facts.retry_of else "",
                    f"Duration {took}" if took else "",
                    f"Message {facts.message}" if facts.message else "")
    if facts.outputs:
        lines.append("Outputs")
        lines += [f"  {name}: {json.dumps(value, ensure_ascii=False, sort_keys=True)}"
                  for name, value in sorted(facts.outputs.items())]
    width = max((len(node.id) for node in tree.nodes), default=0)
    for section in SECTIONS:
        nodes = tree.section(section)
        if nodes:
            lines.append(f"{section}:")
        for index, node in enumerate(nodes):
            branch = "└─" if index + 1 == len(nodes) else "├─"
            lines.append(f"  {branch} {node.id.ljust(width)}  {step_line(node, now, wide=wide)}")
    return "\n".join(lines)

"""A workflow or a run as a graph: Mermaid and Graphviz DOT. Pure: JSON in, text out.

A run's steps are coloured by state; a workflow's are plain. Nodes are step
ids (identifiers, so safe in both languages); labels add the action or the
kind of step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

# Fill colours per step phase, shared by both outputs.
PHASE_COLOURS = {
    "Pending": "#eeeeee",
    "Running": "#90caf9",
    "Retrying": "#ffcc80",
    "Succeeded": "#a5d6a7",
    "Failed": "#ef9a9a",
    "Skipped": "#f5f5f5",
    "Cancelled": "#bcaaa4",
}


@dataclass(frozen=True)
class Node:
    id: str
    label: str
    section: str
    phase: str | None
    approval: bool


@dataclass(frozen=True)
class StepGraph:
    nodes: list[Node]
    edges: list[tuple[str, str]]


def _kind(step: JSON) -> str:
    if step.get("approval") is not None:
        return "approval"
    if step.get("wait") is not None:
        return "wait"
    return str(step.get("action") or "")


def graph_of(spec: JSON, step_states: JSON | None = None) -> StepGraph:
    """`spec` is a Workflow's spec or a run's status.workflowSpec; `step_states` a run's steps by id.

    With `step_states` (a run; unlisted steps are Pending) every node carries a phase; without, none does.
    """
    coloured = step_states is not None
    states = step_states or {}
    nodes: list[Node] = []
    edges: list[tuple[str, str]] = []
    gates = {entry["gateFor"]: entry for entry in states.values() if entry.get("gateFor")}
    for section in ("steps", "compensations", "finally"):
        for step in spec.get(section) or []:
            step_id = step["id"]
            if section == "compensations" and coloured and step_id not in states:
                continue
            phase = (states.get(step_id) or {}).get("phase", "Pending") if coloured else None
            needs = list(step.get("needs") or [])
            gate = gates.get(step_id)
            if gate is not None:
                nodes.append(Node(gate["id"], f"{gate['id']}\\napproval (policy)", section,
                                  gate.get("phase", "Pending"), True))
                edges.extend((need, gate["id"]) for need in needs)
                needs = [gate["id"]]
            nodes.append(Node(step_id, f"{step_id}\\n{_kind(step)}", section, phase, step.get("approval") is not None))
            edges.extend((need, step_id) for need in needs)
    return StepGraph(nodes, edges)


def _label(node: Node) -> str:
    """Id, action and (in a run) phase, one per line; the colour repeats the phase for the eye."""
    return f"{node.label}\\n{node.phase}" if node.phase else node.label


def mermaid(graph: StepGraph) -> str:
    lines = ["flowchart TD"]
    for node in graph.nodes:
        label = _label(node).replace("\\n", "<br/>").replace('"', "'")
        lines.append(f'  {node.id}{{{{"{label}"}}}}' if node.approval else f'  {node.id}["{label}"]')
    lines.extend(f"  {source} --> {target}" for source, target in graph.edges)
    finally_ids = [node.id for node in graph.nodes if node.section == "finally"]
    if finally_ids:
        lines.append("  subgraph finally")
        lines.extend(f"    {node_id}" for node_id in finally_ids)
        lines.append("  end")
    phases = sorted({node.phase for node in graph.nodes if node.phase})
    for phase in phases:
        lines.append(f"  classDef {phase.lower()} fill:{PHASE_COLOURS.get(phase, '#ffffff')},stroke:#555")
        members = ",".join(node.id for node in graph.nodes if node.phase == phase)
        lines.append(f"  class {members} {phase.lower()}")
    return "\n".join(lines) + "\n"


def dot(graph: StepGraph, title: str) -> str:
    lines = [f'digraph "{title}" {{', "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];']
    for node in graph.nodes:
        attributes = [f'label="{_label(node)}"']
        if node.approval:
            attributes.append("shape=hexagon")
        if node.phase:
            attributes.append(f'fillcolor="{PHASE_COLOURS.get(node.phase, "#ffffff")}"')
            attributes.append(f'tooltip="{node.phase}"')
        lines.append(f"  {node.id} [{', '.join(attributes)}];")
    lines.extend(f"  {source} -> {target};" for source, target in graph.edges)
    finally_ids = [node.id for node in graph.nodes if node.section == "finally"]
    if finally_ids:
        lines.append('  subgraph cluster_finally { label="finally"; style=dashed; ' + "; ".join(finally_ids) + "; }")
    if any(node.phase for node in graph.nodes):
        lines.append(f'  labelloc=t; label="{title}";')
    lines.append("}")
    return "\n".join(lines) + "\n"

"""A workflow or a run as a graph: Mermaid and Graphviz DOT. Pure: the display model in, text out.

Draws the display model (towline.plugin.runtree): a run's nodes are coloured
by state, a workflow's are plain. Nodes are step ids (identifiers, so safe in
both languages); labels add what the step does. Gates are hexagons, finally
steps a group, and a failure that ran a compensation a dashed edge.
"""

from __future__ import annotations

from dataclasses import dataclass

from towline.plugin.runtree import StepNode, edges, failure_edges

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
class StepGraph:
    """The nodes as drawn: the display model's nodes and their edges (needs, and failures that ran compensations)."""

    nodes: tuple[StepNode, ...]
    edges: list[tuple[str, str]]
    failures: list[tuple[str, str]]


def graph_of(nodes: tuple[StepNode, ...]) -> StepGraph:
    """A run's nodes (`run_tree(run).nodes`, coloured by phase) or a Workflow's (`step_nodes(spec)`, plain)."""
    return StepGraph(nodes, edges(nodes), failure_edges(nodes))


def _label(node: StepNode) -> str:
    """Id, what it does and (in a run) phase, one per line; the colour repeats the phase for the eye."""
    label = f"{node.id}\\n{node.label}"
    if node.loop is not None:
        label += f"\\n{node.loop.text}"
    if node.child_run:
        label += f"\\nrun {node.child_run}"
    return f"{label}\\n{node.phase}" if node.phase else label


def mermaid(graph: StepGraph) -> str:
    lines = ["flowchart TD"]
    for node in graph.nodes:
        label = _label(node).replace("\\n", "<br/>").replace('"', "'")
        lines.append(f'  {node.id}{{{{"{label}"}}}}' if node.gate else f'  {node.id}["{label}"]')
    lines.extend(f"  {source} --> {target}" for source, target in graph.edges)
    lines.extend(f"  {source} -. on failure .-> {target}" for source, target in graph.failures)
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
        if node.gate:
            attributes.append("shape=hexagon")
        if node.phase:
            attributes.append(f'fillcolor="{PHASE_COLOURS.get(node.phase, "#ffffff")}"')
            attributes.append(f'tooltip="{node.phase}"')
        lines.append(f"  {node.id} [{', '.join(attributes)}];")
    lines.extend(f"  {source} -> {target};" for source, target in graph.edges)
    lines.extend(f'  {source} -> {target} [style=dashed, label="on failure"];' for source, target in graph.failures)
    finally_ids = [node.id for node in graph.nodes if node.section == "finally"]
    if finally_ids:
        lines.append('  subgraph cluster_finally { label="finally"; style=dashed; ' + "; ".join(finally_ids) + "; }")
    if any(node.phase for node in graph.nodes):
        lines.append(f'  labelloc=t; label="{title}";')
    lines.append("}")
    return "\n".join(lines) + "\n"

"""The catalog: built-in actions and user step types, with their schemas, credentials and egress needs.

`towline connectors [-f STEPTYPE.yaml ...] [--json]` prints it offline (the built-ins, plus the step
types in the files given); `kubectl towline connectors [--json]` prints the built-ins plus the
StepTypes of the namespace and the ClusterStepTypes of the cluster. One table, one JSON document:
a step type appears under the name a workflow step uses in `action:`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from towline.api.steptype import ResolvedStepType
from towline.plugin import terminal
from towline.validation.steptypes import StepImagePolicy, action_of, check_step_type
from towline_connectors.catalog import format_table
from towline_connectors.registry import json_schemas

ANY_IMAGE = StepImagePolicy(allowed_prefixes=("",))
"""Offline there is no chart to say which images are allowed: the catalog shows every type's image as it is."""
_COLUMNS = ("ACTION", "MUTATES", "IDEMPOTENCY", "CREDENTIAL", "RETRY", "SUMMARY")


def step_types_of(documents: Iterable[Any]) -> tuple[list[ResolvedStepType], list[str]]:
    """The StepType and ClusterStepType documents among `documents`, and why any of them is unusable."""
    found: list[ResolvedStepType] = []
    problems: list[str] = []
    for document in documents:
        if not isinstance(document, Mapping) or document.get("kind") not in ("StepType", "ClusterStepType"):
            continue
        checked = check_step_type(document, ANY_IMAGE)
        name = (document.get("metadata") or {}).get("name", "?")
        if isinstance(checked, ResolvedStepType):
            found.append(checked)
        else:
            problems += [f"{document.get('kind')} {name}: {problem}" for problem in checked]
    return found, problems


def type_entry(step_type: ResolvedStepType) -> dict[str, Any]:
    """One type as the JSON catalog shows it, next to the built-ins' entries."""
    spec = step_type.spec
    return {
        "summary": spec.description,
        "kind": step_type.kind,
        "image": spec.image,
        "mutating": spec.mutating,
        "idempotency": "honours TOWLINE_IDEMPOTENCY_KEY" if spec.idempotency_key else "none",
        "credentials": [{"slot": slot.name, "keys": list(slot.keys), "optional": slot.optional,
                         "description": slot.description} for slot in spec.credentials],
        "egress": {"ports": list(spec.egress.ports), "hosts": "the step's allowHosts"},
        "timeoutSeconds": spec.timeout_seconds,
        "retry": spec.retry.to_wire() if spec.retry is not None else None,
        "input": spec.inputs,
        "output": spec.outputs,
    }


def catalog_document(types: Sequence[ResolvedStepType]) -> dict[str, Any]:
    document = json_schemas()
    document["title"] = "Towline actions and step types"
    for step_type in sorted(types, key=lambda t: action_of(t.kind, t.name)):
        document["actions"][action_of(step_type.kind, step_type.name)] = type_entry(step_type)
    return document


def catalog_table(types: Sequence[ResolvedStepType]) -> str:
    """The built-ins' table, then the types' rows under the same columns (credential slots and egress ports)."""
    built_ins = format_table()
    if not types:
        return built_ins
    rows = [_COLUMNS]
    for step_type in sorted(types, key=lambda t: action_of(t.kind, t.name)):
        spec = step_type.spec
        slots = ", ".join(slot.name + ("?" if slot.optional else "") for slot in spec.credentials) or "-"
        retry = f"{spec.retry.limit}x {spec.retry.backoff}" if spec.retry and spec.retry.limit else "none"
        ports = ",".join(str(port) for port in spec.egress.ports) or "none"
        summary = f"[{spec.image}; egress ports {ports}] {spec.description.strip()}".strip()
        rows.append((action_of(step_type.kind, step_type.name), "yes" if spec.mutating else "no",
                     "key" if spec.idempotency_key else "none", slots, retry, summary[:160]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
    lines = ["   ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]) for row in rows]
    return built_ins + "\nStep types:\n" + "\n".join(line.rstrip() for line in lines) + "\n"


def render(types: Sequence[ResolvedStepType], *, as_json: bool) -> str:
    return json.dumps(catalog_document(types), indent=2) + "\n" if as_json else catalog_table(types)


def offline_parser() -> argparse.ArgumentParser:
    """`towline connectors [-f FILE ...] [--json]`."""
    parser = argparse.ArgumentParser(
        prog="towline connectors", description="List the built-in actions and the step types in the files given.")
    parser.add_argument("--json", action="store_true", help="print the input/output JSON Schemas instead")
    parser.add_argument("-f", "--file", action="append", default=[], metavar="FILE",
                        help="a StepType or ClusterStepType manifest to include (repeatable)")
    return parser


def offline_main(argv: Sequence[str]) -> int:
    """`towline connectors [-f FILE ...] [--json]`."""
    args = offline_parser().parse_args(argv)
    documents: list[Any] = []
    for path in args.file:
        try:
            documents += list(yaml.safe_load_all(Path(path).read_text()))
        except (OSError, yaml.YAMLError) as error:
            terminal.err(f"{path}: cannot read: {error}")
            return 1
    types, problems = step_types_of(documents)
    for problem in problems:
        terminal.err(problem)
    terminal.out(render(types, as_json=args.json), end="")
    return 1 if problems else 0

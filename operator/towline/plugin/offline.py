"""`kubectl towline validate FILE...`: the operator's own rules, without a cluster.

The same function the operator runs on every Workflow it sees
(`validate_workflow_manifest` with the built-in connector catalogue), so a
file that passes here is Ready once applied, and one that fails names the
same fields the Workflow's status would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from towline.validation import connector_catalog, validate_workflow_manifest


def validate_documents(label: str, documents: list[Any]) -> tuple[list[str], int]:
    """Report lines for one file's documents and how many problems they have."""
    catalog = connector_catalog()
    lines: list[str] = []
    problems = 0
    for index, document in enumerate(documents):
        if document is None:
            continue
        if not isinstance(document, dict) or document.get("kind") != "Workflow":
            kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
            lines.append(f"{label}[{index}]: skipped ({kind} is not a Workflow)")
            continue
        name = (document.get("metadata") or {}).get("name") or f"document {index}"
        spec = document.get("spec")
        if not isinstance(spec, dict):
            lines.append(f"{label}: {name}: spec: missing; a Workflow needs spec.steps")
            problems += 1
            continue
        _, errors = validate_workflow_manifest(spec, catalog)
        if not errors:
            lines.append(f"{label}: {name}: valid")
        for error in errors:
            lines.append(f"{label}: {name}: spec.{error.field}: {error.message}" if not error.field.startswith("spec")
                         else f"{label}: {name}: {error.field}: {error.message}")
        problems += len(errors)
    return lines, problems


def validate_files(paths: list[str]) -> tuple[list[str], int]:
    lines: list[str] = []
    problems = 0
    for path in paths:
        try:
            documents = list(yaml.safe_load_all(Path(path).read_text()))
        except (OSError, yaml.YAMLError) as error:
            lines.append(f"{path}: cannot read: {error}")
            problems += 1
            continue
        found, count = validate_documents(path, documents)
        lines.extend(found)
        problems += count
    return lines, problems

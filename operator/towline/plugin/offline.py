"""`kubectl towline validate FILE...`: the operator's own rules, without a cluster.

The same function the operator runs on every Workflow it sees
(`validate_workflow_manifest` with the built-in connector catalogue), so a
file that passes here is Ready once applied, and one that fails names the
same fields the Workflow's status would. StepType and ClusterStepType manifests
among the files are the step types the Workflows may use (a StepType without a
namespace counts for every Workflow); offline, their images are not checked
against the chart's image policy. ConfigMaps among the files are the modules
`code.wasm` steps read (towline.validation.wasmmodules). Code steps are checked as
if the chart enabled them (codeSteps.enabled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from towline.api.steptype import ResolvedStepType
from towline.plugin.connectors import ANY_IMAGE
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog
from towline.validation.steptypes import StepTypeCatalog, action_of, check_step_type
from towline.validation.subflows import subflow_reference_errors, workflows_by_name
from towline.validation.wasmmodules import config_maps, module_reports


def validate_documents(
    label: str, documents: list[Any], step_types: Sequence[StepTypeDocument] = (),
    maps: Mapping[tuple[str | None, str], dict[str, Any]] | None = None,
) -> tuple[list[str], int]:
    """Report lines for one file's documents and how many problems they have."""
    lines: list[str] = []
    problems = 0
    for index, document in enumerate(documents):
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind") in ("StepType", "ClusterStepType"):
            continue  # read up front, for every file's Workflows
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
        namespace = (document.get("metadata") or {}).get("namespace")
        parsed, errors = validate_workflow_manifest(spec, catalog_for(namespace, step_types))
        if parsed is not None and not errors:  # the other Workflows of the file, as the operator sees the namespace
            errors = subflow_reference_errors(str(name), parsed, workflows_by_name(
                d for d in documents if isinstance(d, dict) and d.get("kind") == "Workflow" and d is not document),
                all_known=False)
        module_problems, notes = module_reports(spec, namespace, maps or {})
        if not errors and not module_problems:
            lines.append(f"{label}: {name}: valid")
        lines += [f"{label}: {name}: {field}: {problem}" for field, problem in module_problems]
        lines += [f"{label}: {name}: note: {note}" for note in notes]
        problems += len(module_problems)
        for error in errors:
            lines.append(f"{label}: {name}: spec.{error.field}: {error.message}" if not error.field.startswith("spec")
                         else f"{label}: {name}: {error.field}: {error.message}")
        problems += len(errors)
    return lines, problems


@dataclass(frozen=True)
class StepTypeDocument:
    namespace: str | None
    """None: no namespace in the file (it counts for every Workflow); "" for a ClusterStepType."""
    step_type: ResolvedStepType


def catalog_for(namespace: str | None, step_types: Sequence[StepTypeDocument]) -> StepTypeCatalog:
    usable = {action_of(d.step_type.kind, d.step_type.name): d.step_type.spec for d in step_types
              if d.namespace in (None, "", namespace) or namespace is None}
    return StepTypeCatalog(connector_catalog(), usable)


def validate_files(paths: list[str]) -> tuple[list[str], int]:
    lines: list[str] = []
    problems = 0
    read: list[tuple[str, list[Any]]] = []
    for path in paths:
        try:
            read.append((path, list(yaml.safe_load_all(Path(path).read_text()))))
        except (OSError, yaml.YAMLError) as error:
            lines.append(f"{path}: cannot read: {error}")
            problems += 1
    step_types: list[StepTypeDocument] = []
    for path, documents in read:
        for document in documents:
            if not isinstance(document, dict) or document.get("kind") not in ("StepType", "ClusterStepType"):
                continue
            name = (document.get("metadata") or {}).get("name", "?")
            checked = check_step_type(document, ANY_IMAGE)
            if isinstance(checked, ResolvedStepType):
                namespace = "" if checked.kind == "ClusterStepType" else (document.get("metadata") or {}).get(
                    "namespace")
                step_types.append(StepTypeDocument(namespace, checked))
                lines.append(f"{path}: {document['kind']} {name}: valid")
            else:
                lines += [f"{path}: {document['kind']} {name}: {problem}" for problem in checked]
                problems += len(checked)
    maps = config_maps([document for _, documents in read for document in documents])
    for path, documents in read:
        found, count = validate_documents(path, documents, step_types, maps)
        lines.extend(found)
        problems += count
    return lines, problems

"""Checks of the WebAssembly modules `code.wasm` steps take from ConfigMaps. Pure: the ConfigMaps are given.

A module is checked as the runner checks it before wasmtime sees it
(towline_connectors.wasmcheck: the magic and version, only WASI preview 1
imports, a `_start`), so a module that would be refused at run time is reported
earlier with the step's field: by `kubectl towline validate` when its ConfigMap
is among the files (one that is not is named as unchecked), and by the operator
when a run starts (it reads the ConfigMaps the steps name; a missing one is a
problem there). A module behind a URL is fetched and checked by the runner only,
after its sha256.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from typing import Any

from towline_connectors.wasmcheck import module_problems

CONFIG_MAP_LIMIT_BYTES = 1_048_576


def config_maps(documents: list[Any]) -> dict[tuple[str | None, str], dict[str, Any]]:
    """(namespace or None, name) -> ConfigMap document, for every ConfigMap among `documents`."""
    found: dict[tuple[str | None, str], dict[str, Any]] = {}
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "ConfigMap":
            metadata = document.get("metadata") or {}
            found[(metadata.get("namespace"), str(metadata.get("name", "")))] = document
    return found


def config_map_sources(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path of `with.module.configMap`, that mapping) for each code.wasm step reading a ConfigMap."""
    for part in ("steps", "finally", "compensations"):
        for index, step in enumerate(spec.get(part) or []):
            if not isinstance(step, Mapping) or step.get("action") != "code.wasm":
                continue
            module = (step.get("with") or {}).get("module") if isinstance(step.get("with"), Mapping) else None
            source = module.get("configMap") if isinstance(module, Mapping) else None
            if isinstance(source, Mapping) and isinstance(source.get("name"), str) and isinstance(
                    source.get("key"), str):
                yield f"spec.{part}[{index}].with.module.configMap", source


def module_reports(
    spec: Mapping[str, Any], namespace: str | None, maps: Mapping[tuple[str | None, str], dict[str, Any]]
) -> tuple[list[tuple[str, str]], list[str]]:
    """((field, problem) for each module that would be refused, notes on modules not checked)."""
    problems: list[tuple[str, str]] = []
    notes: list[str] = []
    for field, source in config_map_sources(spec):
        name, key = str(source["name"]), str(source["key"])
        found = maps.get((namespace, name)) or maps.get((None, name))
        if found is None:
            notes.append(f"{field}: ConfigMap {name} is not among the files; its module was not checked")
            continue
        binary = found.get("binaryData") or {}
        if key not in binary:
            where = "under data (text), not binaryData" if key in (found.get("data") or {}) else "missing"
            problems.append((field, f"ConfigMap {name} key {key} is {where}; create it with kubectl create configmap "
                                    f"{name} --from-file={key}=module.wasm"))
            continue
        try:
            module = base64.b64decode(str(binary[key]), validate=True)
        except (binascii.Error, ValueError):
            problems.append((field, f"ConfigMap {name} binaryData.{key} is not base64"))
            continue
        if len(module) > CONFIG_MAP_LIMIT_BYTES:
            problems.append((field, f"the module is {len(module)} bytes, over a ConfigMap's 1 MiB; serve it from a "
                                    "URL pinned by sha256 (with.module.url, with.module.sha256)"))
        problems += [(field, problem) for problem in module_problems(module)]
    return problems, notes

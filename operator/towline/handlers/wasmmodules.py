"""A run's code.wasm modules from ConfigMaps, checked before the run starts.

The runner checks a module again in the step pod before wasmtime compiles it;
checked here first, a module that would be refused (not WebAssembly, an import
Towline does not provide, no `_start`, over a ConfigMap's size) or a ConfigMap
or key that is missing fails the run before any Job, naming the step's field.
Checked when a run starts rather than when its Workflow is validated: nothing
watches ConfigMaps, so a Workflow applied before its ConfigMap (a GitOps sync
applies them in any order) would otherwise stay not Ready after the ConfigMap came.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from towline.k8s.client import ApiError, KubeApi
from towline.k8s.runs import read_config_map
from towline.validation.wasmmodules import config_map_sources, module_reports


async def module_problems(api: KubeApi, namespace: str, spec: Mapping[str, Any]) -> list[str]:
    """`field: problem` for each code.wasm step of `spec` whose ConfigMap module would be refused."""
    sources = list(config_map_sources(spec))
    if not sources:
        return []
    found: dict[tuple[str | None, str], dict[str, Any]] = {}
    problems: list[str] = []
    for name in sorted({str(source["name"]) for _, source in sources}):
        try:
            body = await read_config_map(api, namespace, name)
        except ApiError as error:
            if error.status != 403:
                raise
            return [f"{field}: the operator may not read ConfigMap {source['name']} ({error.message}); code steps "
                    "need the chart value codeSteps.enabled=true, which grants it get on ConfigMaps"
                    for field, source in sources]
        if body is None:
            problems += [f"{field}: ConfigMap {name} does not exist in namespace {namespace}; create it with "
                         f"kubectl create configmap {name} --from-file={source['key']}=module.wasm"
                         for field, source in sources if source["name"] == name]
        else:
            found[(namespace, name)] = body
    reported, _ = module_reports(spec, namespace, found)  # the notes name the missing ones, reported above
    return problems + [f"{field}: {_without_content(problem)}" for field, problem in reported]


def _without_content(problem: str) -> str:
    """The operator reads ConfigMaps the run's author may not be allowed to read: none of their bytes go into the
    run's status (the offline check, on the author's own files, names the first four)."""
    head, cut, _ = problem.partition("; this one starts with")
    return f"{head}; this one does not" if cut else problem

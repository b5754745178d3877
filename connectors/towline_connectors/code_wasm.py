"""`code.wasm`: a WebAssembly module (WASI preview 1 command) run with wasmtime, fuel- and memory-capped.

The module comes from a ConfigMap key (mounted into the pod as one file) or
from a URL pinned by SHA-256, fetched by the runner through the step's
SSRF-safe client under its `allowHosts`; a digest mismatch refuses it. It is
checked (towline_connectors.wasmcheck: magic, version, only WASI preview 1
imports, `_start`) by the sandboxed host process (towline_connectors.codehost)
before wasmtime compiles it: stdin is the inputs as JSON, stdout (at most the
result limit) is the output JSON, stderr is the step's log. No directory is
preopened and no socket exists, the environment is only `env`, and fuel bounds
the instructions it may run whatever the clock says.

Compiled code is not cached: each step pod is new and its root read-only, and a
cache shared between pods would be a writable volume other steps' modules could
poison. Compiling the 3.35 MB Go example takes 2 to 3 s on two cores (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from towline_connectors.code import RESULT_ROOM, CpuLimit, code_pod_needs, memory_between, memory_bytes, run_in_sandbox
from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass, classify_http_status
from towline_connectors.httpcall import HttpCall, send
from towline_connectors.models import HttpUrlText, InputModel, OutputModel
from towline_connectors.spec import (
    CONFIG_MAP_FILE_PATH,
    ActionResult,
    ActionSpec,
    Destination,
    Inputs,
    PodNeeds,
    url_destination,
)
from towline_step.protocol import CREDENTIAL_KEY_PATTERN, RESULT_LIMIT_BYTES

CONFIG_MAP_MODULE_LIMIT_BYTES = 1_048_576
"""A ConfigMap holds at most 1 MiB (Kubernetes' limit, metadata included): larger modules need a URL."""
URL_MODULE_LIMIT_BYTES = 64 << 20
DEFAULT_FUEL = 2_000_000_000
DEFAULT_MEMORY = "64Mi"
MIN_MEMORY, MAX_MEMORY = 1 << 20, 2 << 30
RUNNER_SHARE_BYTES = 384 << 20
"""The pod's memory limit is the module's `memory` plus this: the runner, and wasmtime compiling the module."""
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
KEY_PATTERN = rf"^{CREDENTIAL_KEY_PATTERN}$"
"""A ConfigMap key: Kubernetes gives it the rule of a Secret's data key, the step protocol's credential key."""
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class ConfigMapKey(InputModel):
    name: str = Field(pattern=NAME_PATTERN, max_length=253, description="The ConfigMap, in the run's namespace.")
    key: str = Field(pattern=KEY_PATTERN, max_length=253, description="Its binaryData key holding the module.")


class ModuleSource(InputModel):
    """Exactly one of `configMap` or `url` (with `sha256`)."""

    config_map: ConfigMapKey | None = Field(default=None, description="A module of at most 1 MiB in a ConfigMap.")
    url: HttpUrlText | None = Field(
        default=None, description="An http or https URL the runner fetches (its host in allowHosts); the bytes must "
        "match sha256, so plain http keeps integrity but not privacy.")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="The module's SHA-256, hex.")

    @model_validator(mode="after")
    def _one_source(self) -> ModuleSource:
        if (self.config_map is None) == (self.url is None):
            raise ValueError("set exactly one of module.configMap {name, key} or module.url with module.sha256")
        if self.url is not None and self.sha256 is None:
            raise ValueError("module.url needs module.sha256 (sha256sum of the .wasm file), so the bytes that run "
                             "are the bytes you reviewed")
        if self.config_map is not None and self.sha256 is not None:
            raise ValueError("module.sha256 pins a URL; a ConfigMap is pinned by whoever may edit it: remove sha256")
        return self


class WasmCodeInput(InputModel):
    """`with:` of code.wasm."""

    module: ModuleSource
    inputs: dict[str, Any] = Field(default_factory=dict, description="Written to the module's stdin as JSON.")
    fuel: int = Field(default=DEFAULT_FUEL, ge=1, le=1_000_000_000_000,
                      description="Instruction budget (about one unit per instruction); running out fails the step.")
    memory: Annotated[str, memory_between(MIN_MEMORY, MAX_MEMORY)] = Field(
        default=DEFAULT_MEMORY, description="Cap on the module's linear memory, e.g. 64Mi.")
    cpu: CpuLimit = Field(default="1", description="The pod's CPU limit, e.g. 500m.")
    env: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN, max_length=128)],
              Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=32, description="The module's whole environment (nothing else is passed).")


class WasmCodeOutput(OutputModel):
    """The JSON document the module wrote to stdout."""


def wasm_destinations(inputs: Inputs) -> list[Destination]:
    module = inputs.get("module")
    if isinstance(module, dict) and "url" in module:
        return url_destination(module["url"])
    return []


def wasm_pod_needs(inputs: Inputs) -> PodNeeds:
    module = inputs.get("module")
    source = module.get("configMap") if isinstance(module, dict) else None
    file = None
    if isinstance(source, dict) and isinstance(source.get("name"), str) and isinstance(source.get("key"), str):
        file = (source["name"], source["key"])
    return code_pod_needs(inputs, DEFAULT_MEMORY, RUNNER_SHARE_BYTES, file)


def read_config_map_module(source: ConfigMapKey, path: Path) -> bytes:
    """The mounted key; its absence names the ConfigMap, the key and the command that creates it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ActionError(ErrorClass.PERMANENT, f"module.configMap: ConfigMap {source.name} has no key {source.key} "
                          f"(or does not exist) in this namespace; create it with kubectl create configmap "
                          f"{source.name} --from-file={source.key}=module.wasm") from None
    if len(data) > CONFIG_MAP_MODULE_LIMIT_BYTES:
        raise ActionError(ErrorClass.PERMANENT, f"module.configMap: the module is {len(data)} bytes, over "
                          f"{CONFIG_MAP_MODULE_LIMIT_BYTES}; serve it from a URL pinned by sha256")
    return data


async def fetch_module(url: str, sha256: str, ctx: ActionContext) -> bytes:
    """GET the module through the step's guard and keep it only if its digest is the pinned one."""
    reply = await send(ctx, HttpCall("GET", url, follow_redirects=True, max_response_bytes=URL_MODULE_LIMIT_BYTES,
                                     timeout_seconds=60.0, label="module.url"))
    error = classify_http_status(reply.status, reply.headers, now=ctx.clock(), what="module.url")
    if error is not None:
        raise error
    digest = hashlib.sha256(reply.body).hexdigest()
    if digest != sha256:
        raise ActionError(ErrorClass.PERMANENT, f"module.url: the module's sha256 is {digest}, not the pinned "
                          f"{sha256}; refusing to run it (pin the new digest if the change is intended)")
    return reply.body


async def load_module(source: ModuleSource, ctx: ActionContext) -> bytes:
    if source.config_map is not None:
        return read_config_map_module(source.config_map, Path(CONFIG_MAP_FILE_PATH))
    assert source.url is not None and source.sha256 is not None
    return await fetch_module(source.url, source.sha256, ctx)


def parse_stdout(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else None
    except ValueError as error:
        raise ActionError(ErrorClass.PERMANENT, f"the module's stdout is not one JSON document ({error}); write "
                          "only the output JSON to stdout and logs to stderr") from None


async def run_wasm_code(inputs: WasmCodeInput, ctx: ActionContext) -> ActionResult:
    module = await load_module(inputs.module, ctx)
    request = {"kind": "wasm", "fuel": inputs.fuel, "memoryBytes": memory_bytes(inputs.memory),
               "outputLimit": RESULT_LIMIT_BYTES, "env": inputs.env}
    document = await run_in_sandbox(ctx, request, inputs.inputs, module, "the module")
    fuel_used = document.get("fuelUsed")
    return ActionResult(output=parse_stdout(str(document.get("stdout") or "")),
                        usage={"fuel": fuel_used} if isinstance(fuel_used, int) else None)


SPEC = ActionSpec(
    name="code.wasm",
    summary="Run a WebAssembly (WASI) module with fuel and memory caps (opt-in)",
    input_model=WasmCodeInput,
    output_model=WasmCodeOutput,
    run=run_wasm_code,
    mutating=False,
    shrink_hint=f"write a smaller JSON document to stdout ({RESULT_ROOM})",
    destinations_for=wasm_destinations,
    pod_needs_for=wasm_pod_needs,
    code=True,
)

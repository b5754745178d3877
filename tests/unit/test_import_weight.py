"""What an import really loads, seen in a fresh interpreter.

The engine is pure: importing it loads no HTTP client, no operator framework, no Kubernetes client.
import-linter sees the direct edges between packages, not what an `__init__` pulls in on the way
(`towline.validation` once re-exported the connector catalog, which loads every connector and httpx).

`kubectl towline` starts a new process for every command, and the tests alone start a hundred: its
start loads neither the resource models (pydantic) nor the engine, which took a third of it (0.69 ->
0.45 s of CPU with them gone).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("httpx", "kopf", "kubernetes", "kubernetes_asyncio", "aiohttp", "prometheus_client", "wasmtime")
STANDARD_LIBRARY_CONNECTOR_MODULES = {"towline_connectors", "towline_connectors.wire", "towline_connectors.netguard",
                                      "towline_connectors.cellib"}
"""The connector modules the engine may share: standard library only (import-linter holds them to that), and
the CEL evaluator without its REPL."""


def loaded_by(module: str) -> set[str]:
    script = (f"import sys, json, {module}; "
              "print(json.dumps(sorted(name for name, loaded in sys.modules.items() if loaded is not None)))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(result.stdout))


@pytest.mark.parametrize("module", ["towline.engine", "towline.validation"])
def test_the_pure_layers_load_no_client_or_framework(module: str) -> None:
    loaded = loaded_by(module)
    assert not {name for name in loaded if name.split(".")[0] in HEAVY}
    assert {name for name in loaded if name.split(".")[0] == "towline_connectors"} <= \
        STANDARD_LIBRARY_CONNECTOR_MODULES


def test_the_check_sees_a_heavy_import() -> None:
    assert "httpx" in loaded_by("towline.validation.catalog")


def test_the_plugins_start_loads_neither_the_resource_models_nor_the_engine() -> None:
    loaded = loaded_by("towline.plugin.cli")
    assert "towline.api.runterms" in loaded, "the phases it reads come from the light module"
    models = {"towline.api.run", "towline.api.workflow", "towline.api.steptype", "towline.api.approval"}
    assert not {name for name in loaded if name.split(".")[0] in ("pydantic", "httpx") or name in models
                or name.split(".")[:2] in (["towline", "engine"], ["towline", "validation"])}


PROCESSES = ("towline.cli", "towline.runtime.wiring", "towline.triggers.ingress.server", "towline.archive.app",
             "towline.plugin.cli", "towline.plugin.commands", "towline.plugin.ui.serving")
"""The modules the operator, the ingress, the archive, the plugin and the web view start with."""


@pytest.mark.parametrize("module", PROCESSES)
def test_no_process_loads_a_generated_kubernetes_client(module: str) -> None:
    """kopf's helper imported kubernetes-asyncio's only because it is installed (844 modules, ~47 MiB, ~0.8 s of
    CPU per process), and the synchronous client's where the tests' tools are installed; the connection is
    Towline's own (towline.k8s.connection). A kubeconfig with a credential plugin still loads kubernetes-asyncio,
    then and only then (tests/unit/k8s/test_connection_settings.py)."""
    loaded = loaded_by(module)
    assert not {name for name in loaded if name.split(".")[0] in ("kubernetes_asyncio", "kubernetes")}
    if module == "towline.runtime.wiring":
        assert "kopf" in loaded, "the check sees the operator's framework"


def test_kopf_still_takes_kubernetes_asyncio_when_it_was_loaded_first() -> None:
    """The guard only keeps out what nobody asked for: a process that loaded the library first keeps it."""
    loaded = loaded_by("kubernetes_asyncio.client, towline.runtime.wiring")
    assert "kubernetes_asyncio.client" in loaded and "kopf" in loaded


@pytest.mark.parametrize("module", PROCESSES)
def test_no_process_loads_the_opentelemetry_sdk_while_tracing_is_off(module: str) -> None:
    """Tracing is off by default (the chart's tracing.endpoint): the SDK and its OTLP exporter (about 3 MiB of the
    operator's memory) are loaded by `span_sink` when it is on, never at a process's start."""
    loaded = loaded_by(f"{module}, towline.tracing; towline.tracing.span_sink(towline.tracing.TracingConfig())")
    assert not {name for name in loaded if name.split(".")[0] == "opentelemetry"}


def test_the_check_sees_the_sdk_once_tracing_is_on() -> None:
    loaded = loaded_by("towline.tracing; towline.tracing.span_sink(towline.tracing.TracingConfig("
                       "endpoint='http://127.0.0.1:4318/v1/traces')).shutdown()")
    assert "opentelemetry.sdk.trace" in loaded

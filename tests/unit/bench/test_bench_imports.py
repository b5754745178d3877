"""Every module of tests/bench imports: a benchmark is run by hand, so a name a refactor moves breaks it silently
unless `make test` imports it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import tests.bench

RUNS_ON_IMPORT = frozenset({"__main__"})
"""`python -m tests.bench` runs every benchmark as it is imported."""

MODULES = sorted(m.name for m in pkgutil.iter_modules(tests.bench.__path__) if m.name not in RUNS_ON_IMPORT)


def test_every_benchmark_module_is_found() -> None:
    assert {"bench_node", "bench_step_admission", "rawclient"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_benchmark_module_imports_and_says_what_it_is_for(module: str) -> None:
    assert (importlib.import_module(f"tests.bench.{module}").__doc__ or "").strip(), f"tests/bench/{module}.py"

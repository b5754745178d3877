"""`python -m tests.bench` (make bench): run every `bench_*.py` module's `main()` and print its figures.

Benchmarks are never part of `make test`: timings on a shared machine are noisy. bench_argo (`make bench-argo`)
is left out: it builds and runs a second engine, Argo Workflows, for a comparison of its own.
"""

import importlib
import pkgutil

import tests.bench

SEPARATE = frozenset({"bench_argo"})

for module in sorted(m.name for m in pkgutil.iter_modules(tests.bench.__path__) if m.name.startswith("bench_")
                     and m.name not in SEPARATE):
    importlib.import_module(f"tests.bench.{module}").main()

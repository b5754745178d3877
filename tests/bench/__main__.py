"""`python -m tests.bench` (make bench): run every `bench_*.py` module's `main()` and print its figures.

Benchmarks are never part of `make test`: timings on a shared machine are noisy.
"""

import importlib
import pkgutil

import tests.bench

for module in sorted(m.name for m in pkgutil.iter_modules(tests.bench.__path__) if m.name.startswith("bench_")):
    importlib.import_module(f"tests.bench.{module}").main()

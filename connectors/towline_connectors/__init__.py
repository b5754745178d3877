"""Towline connectors: the step side. Never imports kopf, a Kubernetes client or `towline`.

Importing the package keeps two libraries' command-line front ends out of every process that runs
a connector or evaluates an expression (each step pod, the operator, every `kubectl towline`):
`common-expression-language`'s package imports its REPL (`cel.cli`: rich, prompt_toolkit, typer) and
httpx imports its CLI (`httpx._main`: click, rich, pygments) whenever those are installed, which the
first makes them. Together about a second of CPU per process, for tools Towline never runs. Before
either package is first imported, an empty module stands in for `cel.cli`, and `httpx._main` is marked
absent so httpx keeps its own fallback `main`. The packages' APIs are unchanged
(tests/unit/test_cellib.py checks both).
"""

import sys as _sys
import types as _types

if "cel" not in _sys.modules:
    _sys.modules.setdefault("cel.cli", _types.ModuleType("cel.cli", "Not loaded: Towline does not use the CEL REPL."))
if "httpx" not in _sys.modules and "httpx._main" not in _sys.modules:
    _sys.modules["httpx._main"] = None  # type: ignore[assignment]  # None: "absent" to the import system

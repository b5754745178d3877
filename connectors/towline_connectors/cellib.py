"""The CEL evaluator without its REPL: every Towline module imports `cel` from here.

The `common-expression-language` package imports its REPL (`cel.cli`: rich, prompt_toolkit, typer) when it
is imported: about half a second of CPU in every process that evaluates an expression (the operator, each step
pod, every `kubectl towline`), for a tool Towline never runs. An empty module stands in for `cel.cli` before
the package is first imported; its API is unchanged (tests/unit/test_cellib.py). An import-linter contract
lets no other Towline module import `cel` itself.
"""

from __future__ import annotations

import sys
import types

if "cel" not in sys.modules:
    sys.modules.setdefault("cel.cli", types.ModuleType("cel.cli", "Not loaded: Towline does not use the CEL REPL."))

import cel

__all__ = ["cel"]

"""The CEL evaluator, imported after the package's REPL stand-in (see `towline_connectors`).

A module outside the connectors (`towline.expressions`) that wrote `import cel` would import it in
the third-party block, before any `towline_connectors` module and so before the stand-in; it
imports `cel` from here instead.
"""

from __future__ import annotations

import cel

__all__ = ["cel"]

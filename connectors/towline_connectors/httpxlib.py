"""httpx without its command line: every Towline module imports httpx from here.

httpx imports its CLI (`httpx._main`: click, rich, pygments) whenever those are installed, which the CEL
package's REPL makes them: about half a second of CPU in every process that makes a request (each step pod,
the operator's notifications, the ingress's test sender). Marking `httpx._main` absent before httpx is first
imported makes httpx keep its own fallback `main`; its API is unchanged (tests/unit/test_cellib.py). An
import-linter contract lets no other Towline module import httpx itself.
"""

from __future__ import annotations

import sys

if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "absent" to the import system

import httpx

__all__ = ["httpx"]

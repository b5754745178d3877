"""Run the Argo CD health checks (docs/gitops/health-*.lua) the way Argo CD does.

Argo CD runs a health script with gopher-lua (Lua 5.1): the resource, decoded
from JSON into Lua tables, is the global `obj`, and the script's return value
is a table with `status` and `message`. lupa's Lua 5.1 runtime stands in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lupa import lua51

DOCS = Path(__file__).parents[1] / "docs" / "gitops"


def health_script(kind: str) -> str:
    return (DOCS / f"health-{kind.lower()}.lua").read_text()


def argocd_health(kind: str, obj: dict[str, Any]) -> dict[str, str]:
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    # Argo CD wraps nothing around the script: it is a chunk whose `return` is the verdict.
    result = lua.execute(health_script(kind))
    return {"status": str(result["status"]), "message": str(result["message"] or "")}

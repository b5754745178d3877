"""The step kit's `sdk` extra: what the SDK needs beyond the standard library, and the error that names it.

`towline_step.protocol` (and the modules a protocol-only step may use) run on the standard library alone;
the SDK (`@step`, typed inputs and outputs, `python -m towline_step`, the manifest writer) needs pydantic and
PyYAML, which `pip install 'towline-step[sdk]'` brings. This module must stay standard library only: it is
what an SDK module imports to say so when they are missing.
"""

from __future__ import annotations

SDK_EXTRA = "towline-step[sdk]"
"""The distribution and extra a step author installs to use the SDK."""
SDK_MODULES = frozenset({"pydantic", "pydantic_core", "yaml"})
"""The top-level modules the extra brings (pydantic with pydantic-core, and PyYAML)."""


def sdk_missing(error: ModuleNotFoundError, what: str) -> ImportError | ModuleNotFoundError:
    """The ImportError to raise when `what` (a part of the SDK) could not import `error.name`.

    A module the extra does not bring is some other problem: `error` itself is returned, unchanged.
    """
    missing = (error.name or "").partition(".")[0]
    if missing not in SDK_MODULES:
        return error
    return ImportError(
        f"{what} is part of the step kit's SDK, which needs {missing} (not installed): install the step kit "
        f"with its SDK extra, pip install '{SDK_EXTRA}'. Without it, towline_step.protocol works with the "
        "standard library alone (docs/step-protocol.md).",
        name=error.name,
    )

"""`make dev` starts a real node of its own, and the machine holds one node at a time: its tests run
first in a session, before any test starts the session's real node (which would make it wait)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Ours first, and every one exclusive (`make dev` starts a node of its own, and the machine holds one node
    at a time): `make test` runs them after the concurrent part."""
    ours = [item for item in items if HERE in Path(str(item.path)).parents]
    for item in ours:
        item.add_marker(pytest.mark.exclusive)
    items[:] = ours + [item for item in items if item not in ours]

"""One in-memory API server and context per test (see handler_fakes.py)."""

from __future__ import annotations

import pytest
from handler_fakes import MemoryContext


@pytest.fixture
def context() -> MemoryContext:
    return MemoryContext()

"""Which test worker this process is, and what it may touch, when the suite runs concurrently.

`python -m tests.suite` starts one node and control plane and runs the concurrent part under
pytest-xdist: every worker gets its own operator, and the operator watches only the namespaces
whose names carry the worker's id (`t-gw1-...`), so no worker's operator reconciles another's runs.
Without xdist (plain `pytest`), the id is empty and everything is as it was: one operator, every
namespace.
"""

from __future__ import annotations

import os

SHARED_NODE = "TOWLINE_TEST_SHARED_NODE"
"""Environment variable naming the state directory of the node the suite runner started; workers
attach to it instead of starting one of their own."""


def worker_id() -> str:
    """`gw0`, `gw1`, ... under pytest-xdist; empty otherwise."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def namespace_prefix() -> str:
    """What every namespace a test creates starts with: `t-gw0-` for worker gw0, `t-` alone."""
    worker = worker_id()
    return f"t-{worker}-" if worker else "t-"


def operator_scope() -> tuple[str, ...]:
    """The namespaces this worker's operator watches (kopf globs); empty: all of them."""
    return (f"{namespace_prefix()}*",) if worker_id() else ()

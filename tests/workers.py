"""Which test worker this process is, and what it may touch, when the suite runs concurrently.

`python -m tests.suite` starts one node and control plane and runs the concurrent part under
pytest-xdist: every worker gets its own operator, and the operator watches only the namespaces
whose names carry the worker's id (`t-gw1-...`), so no worker's operator reconciles another's runs.
Without xdist (plain `pytest`), the id is empty and everything is as it was: one operator, every
namespace.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

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


LONGEST_FIRST = (
    "tests/integration/test_plugin_everyday.py",
    "tests/integration/test_code_steps.py",
    "tests/integration/test_plugin.py",
    "tests/integration/test_step_types.py",
    "tests/integration/helm/test_helm_install.py",
    "tests/integration/test_plugin_live.py",
    "tests/integration/test_images.py",
    "tests/integration/test_operator_ha.py",
    "tests/integration/test_operator_shards.py",
    "tests/integration/test_operator_safety.py",
    "tests/integration/attacks/test_attack_approvals.py",
    "tests/integration/test_operator_api_outage.py",
    "tests/integration/test_operator_runs.py",
)
"""The concurrent part's longest files by hand (their tests' summed durations, docs/benchmarks.md), handed out first
when there is no measured record of this machine's runs yet (a fresh clone: tests.durations).

pytest-xdist's `--dist loadfile` gives a free worker the next file in collection order (with
`--no-loadscope-reorder`, which `tests.suite` passes: by default xdist 3 sorts the files by their number
of tests, which undid this order and left these files for the end); a long file handed out last ran alone
at the end while the other workers idled (about 50 s at a fifth of the cores). Longest first runs these
files, which mostly wait for containers, while the exclusive worlds keep the cores busy, and leaves the
short, CPU-bound unit files for the end. A name missing here only costs time."""


def longest_first(paths: list[str], measured: Mapping[str, float] | None = None) -> list[int]:
    """The order in which to run test files `paths` (indexes into it), a stable sort, so each file's tests stay
    together and in order. With `measured` (each file's seconds in the suite's last runs, tests.durations): the
    files no run has measured yet first (a new file may be long: handed out last it could end the part alone), then
    the measured ones, longest first. Without: LONGEST_FIRST's first, then the rest as they were."""
    if measured:
        return sorted(range(len(paths)), key=lambda index: -measured.get(paths[index], math.inf))
    rank = {path: position for position, path in enumerate(LONGEST_FIRST)}
    return sorted(range(len(paths)), key=lambda index: rank.get(paths[index], len(LONGEST_FIRST)))


IN_THE_WORLDS: dict[str, tuple[str, ...]] = {
    "helm_world": (
        "tests/integration/test_operator_shards.py",
        "tests/integration/test_approval_after_restart.py",
    ),
    "rest_world": (
        "tests/integration/test_operator_api_outage.py",
        "tests/integration/test_operator_ha.py",
        "tests/integration/test_approval_notifications.py",
        "tests/integration/test_control_plane_restart.py",
        # Not the browser tests: the exclusive tests before them restart the world's node (a new API server port
        # and CA), which the session's clients and identity provider do not follow.
    ),
}
"""Files of the concurrent part that the exclusive part's worlds run after their own tests share their node, when
the whole suite runs (`python -m tests.suite`, i.e. `make test`), by the marker each key names (given at
collection, tests/conftest.py).

The worlds' exclusive tests end 100-250 s before the concurrent part does, and from then on the cores are partly
idle while the three workers' last files wait for pods (docs/benchmarks.md). These files mostly wait too (a
Lease's expiry, an API server's restart, a notification's retries), so there they fill the worlds' idle end
instead of lengthening the workers'. They need no worker of their own: they run as a plain `pytest` runs them, on
the world's node. With `--only` either part, `--random-order` or a selection of one's own, they stay in the
concurrent part."""

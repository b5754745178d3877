"""`make test`: the whole suite, the concurrent part first, then the tests that must own the machine.

1. One node and control plane (`NodeCluster`) with the operator and runner images loaded, the
   test-hosts network, Towline's CRDs and the chart's RBAC and admission policies: started here,
   once, before any test.
2. `pytest -n WORKERS -m "not exclusive"`: unit and integration tests together. Every worker
   attaches to that node (`TOWLINE_TEST_SHARED_NODE`), runs its own operator (own Lease) that
   watches only its own namespaces (`tests.workers`), and works in namespaces of its own.
3. That node stopped, `pytest -m exclusive` in one process, which starts a node of its own as
   a plain `pytest` does: the tests that restart the API server or etcd, pause the enforcer,
   replace the operator, install the chart with Helm, change cluster-wide policy, or measure.

Each part prints its slowest tests; at the end the wall time of each part. The exit status is
non-zero if any part failed. Without root, or against an existing cluster
(`TOWLINE_TEST_KUBECONFIG`), it is one plain `pytest` run, as before.

    python -m tests.suite [--workers N] [--random-order] [--only concurrent|exclusive] [pytest args...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tests.integration.support import TEST_SERVER_ADDRESS, TEST_SERVER_ALIAS
from tests.workers import SHARED_NODE
from towline_dev.existing import ENVIRONMENT_VARIABLE
from towline_dev.images import ensure_images
from towline_dev.install import install_chart, install_crds
from towline_dev.node.probehosts import TestHostNetwork
from towline_dev.node.realnode import NodeCluster

DEFAULT_WORKERS = 3
"""Measured on the 2-core CI machine (docs/benchmarks.md, "The test suite's time"): the suite mostly
waits for containers and Jobs, so more workers than cores pay off until the operators' CPU saturates."""
DURATIONS = "--durations=25"


def progress(message: str) -> None:
    print(f"[towline suite] {message}", file=sys.stderr, flush=True)


@contextmanager
def shared_node() -> Iterator[NodeCluster]:
    """The node every worker of the concurrent part attaches to, ready for tests; stopped after."""
    cluster = NodeCluster(progress=progress).start()
    hosts = TestHostNetwork()
    try:
        assert cluster.node is not None and cluster.plane is not None
        loaded = set(cluster.node.images())
        for reference, archive in ensure_images(progress).items():
            if reference not in loaded:
                cluster.node.load_image(archive)
        hosts.start()
        hosts.add([TEST_SERVER_ADDRESS, TEST_SERVER_ALIAS])
        install_crds(cluster.plane)
        install_chart(cluster.plane)
        progress(f"shared node ready in {cluster.startup_seconds or 0:.1f} s ({cluster.state_dir})")
        yield cluster
    finally:
        hosts.stop()
        cluster.stop()


def pytest(args: Sequence[str], env: dict[str, str] | None = None) -> int:
    """One pytest run; 5 (nothing selected) counts as success."""
    code = subprocess.call([sys.executable, "-m", "pytest", *args], env=env)
    return 0 if code == 5 else code


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m tests.suite", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TOWLINE_TEST_WORKERS", DEFAULT_WORKERS)),
                        help=f"pytest-xdist workers for the concurrent part (default {DEFAULT_WORKERS}, "
                             "or $TOWLINE_TEST_WORKERS)")
    parser.add_argument("--random-order", action="store_true",
                        help="shuffle the concurrent part (pytest-randomly): no test may rely on another's leftovers")
    parser.add_argument("--only", choices=("concurrent", "exclusive"), help="run one part only")
    return parser.parse_known_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options, rest = parse(sys.argv[1:] if argv is None else argv)
    selection = rest or ["tests"]
    if os.geteuid() != 0 or os.environ.get(ENVIRONMENT_VARIABLE):
        progress("no local node here (not root, or an existing cluster): one plain pytest run")
        return pytest(["-q", DURATIONS, "-p", "no:randomly", *selection])
    timings: dict[str, float] = {}
    codes: dict[str, int] = {}
    if options.only in (None, "concurrent"):
        started = time.monotonic()
        with shared_node() as cluster:
            timings["shared node start"] = time.monotonic() - started
            env = {**os.environ, SHARED_NODE: str(cluster.state_dir)}
            order = ["-p", "randomly"] if options.random_order else ["-p", "no:randomly"]
            began = time.monotonic()
            codes["concurrent"] = pytest(["-q", DURATIONS, *order, "-n", str(options.workers), "--dist", "loadfile",
                                          "-m", "not exclusive", *selection], env)
            timings[f"concurrent part ({options.workers} workers)"] = time.monotonic() - began
        timings["concurrent part with node start and stop"] = time.monotonic() - started
    if options.only in (None, "exclusive"):
        began = time.monotonic()
        codes["exclusive"] = pytest(["-q", DURATIONS, "-p", "no:randomly", "-m", "exclusive", *selection])
        timings["exclusive part (own node)"] = time.monotonic() - began
    for what, seconds in timings.items():
        progress(f"{what}: {seconds / 60:.1f} min ({seconds:.0f} s)")
    failed = {part: code for part, code in codes.items() if code}
    if failed:
        progress(f"failed: {', '.join(f'{part} (exit {code})' for part, code in failed.items())}")
    return max(failed.values(), default=0)


if __name__ == "__main__":
    raise SystemExit(main())

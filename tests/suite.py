"""`make test`: the whole suite, the concurrent part first, then the tests that must own the machine.

1. One node and control plane (`NodeCluster`) with the operator and runner images loaded, the
   test-hosts network, Towline's CRDs and the chart's RBAC and admission policies: started here,
   once, before any test.
2. `pytest -n WORKERS -m "not exclusive"`: unit and integration tests together. Every worker
   attaches to that node (`TOWLINE_TEST_SHARED_NODE`), runs its own operator (own Lease) that
   watches only its own namespaces (`tests.workers`), and works in namespaces of its own.
3. At the same time, `pytest -m exclusive` in two processes, each inside a world of its own
   (`towline_dev.node.world`: its own network, mounts and processes), where it starts a node of
   its own as a plain `pytest` does: the tests that restart the API server or etcd, pause the
   enforcer, replace the operator, install the chart with Helm, change cluster-wide policy, or
   measure. One world runs the Helm tests, the other the rest (`EXCLUSIVE_SPLIT`); in each they
   own the world's node one after the other, as they owned the machine when they ran after the
   concurrent part; the parts share only the CPU, the disk and the caches. Each world then also
   runs a few of the concurrent part's files that mostly wait (`tests.workers.IN_THE_WORLDS`),
   which would otherwise keep the workers busy after the worlds had ended. A world reaches the
   network through the machine (its uplink), as the machine does. Its output is printed as it
   comes, each line marked with its part (`[exclusive: helm]`, `[exclusive: rest]`).

Each part prints its slowest tests; at the end the wall time of each part. Each part's files' seconds are added
to a record in the build cache, from which the next run's concurrent part hands out its longest files first
(tests.durations, tests.workers.longest_first). The exit status is
non-zero if any part failed. Without root, or against an existing cluster
(`TOWLINE_TEST_KUBECONFIG`), it is one plain `pytest` run, as before. `--one-after-the-other`
runs the exclusive part on the machine itself after the concurrent part (the layout before worlds).

    python -m tests.suite [--workers N] [--random-order] [--only concurrent|exclusive]
                          [--one-after-the-other] [pytest args...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from tests import durations
from tests.integration.support import TEST_SERVER_ADDRESS, TEST_SERVER_ALIAS
from tests.workers import IN_THE_WORLDS, SHARED_NODE
from towline_dev.existing import ENVIRONMENT_VARIABLE
from towline_dev.idp.provider import IdentityProvider
from towline_dev.images import ensure_images
from towline_dev.install import install_chart, install_crds
from towline_dev.node import world
from towline_dev.node.probehosts import TestHostNetwork
from towline_dev.node.realnode import NodeCluster

DEFAULT_WORKERS = 3
"""Measured on the 2-core CI machine (docs/benchmarks.md, "The test suite's time"): the suite mostly
waits for containers and Jobs, so more workers than cores pay off until the operators' CPU saturates."""
DURATIONS = "--durations=25"
EXCLUSIVE = ("-q", DURATIONS, "-p", "no:randomly", "-m", "exclusive")
"""pytest's arguments for the exclusive part, before the selection."""
CONCURRENT_MARKS = "not exclusive"
EXCLUSIVE_SPLIT = "tests/integration/helm"
"""The exclusive part in two worlds at once: the tests under this directory (about 400 s of the 730 s the part
took alone, docs/benchmarks.md) and the rest. They mostly wait (rollouts, Lease expiry, restarts, `make dev`'s
own node), so side by side they end sooner, and the concurrent part is the longest again. Only when the whole
suite runs (`tests`): a selection of one's own runs in one world."""


def progress(message: str) -> None:
    print(f"[towline suite] {message}", file=sys.stderr, flush=True)


@contextmanager
def shared_node() -> Iterator[NodeCluster]:
    """The node every worker of the concurrent part attaches to, ready for tests; stopped after."""
    cluster = NodeCluster(progress=progress).start()
    hosts = TestHostNetwork()
    identity: list[IdentityProvider] = []
    try:
        assert cluster.node is not None and cluster.plane is not None
        loaded = set(cluster.node.images())
        for reference, archive in ensure_images(progress).items():
            if reference not in loaded:
                cluster.node.load_image(archive)
        hosts.start()
        hosts.add([TEST_SERVER_ADDRESS, TEST_SERVER_ALIAS])
        # Every worker's `identity_provider` uses this one: one issuer address per node.
        identity.append(IdentityProvider(cluster.plane.state_dir).start())
        install_crds(cluster.plane)
        install_chart(cluster.plane)
        progress(f"shared node ready in {cluster.startup_seconds or 0:.1f} s ({cluster.state_dir})")
        yield cluster
    finally:
        for provider in identity:
            provider.stop()
        hosts.stop()
        cluster.stop()


def pytest(args: Sequence[str], env: dict[str, str] | None = None) -> int:
    """One pytest run; 5 (nothing selected) counts as success."""
    code = subprocess.call([sys.executable, "-m", "pytest", *args], env=env)
    return 0 if code == 5 else code


class Measured:
    """Where each part writes its files' seconds, and the copy of the record the workers order their files by
    (tests.durations); the parts' seconds go into the record when all have ended."""

    def __init__(self) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="towline-durations-"))
        self._seen = self._directory / "seen.json"
        durations.write(self._seen, durations.read(durations.record_path()))
        self._parts: dict[str, Path] = {}

    def env(self, part: str) -> dict[str, str]:
        """The environment variables for one part's pytest: its own file to write, the record as it was."""
        out = self._parts.setdefault(part, self._directory / f"part-{len(self._parts)}.json")
        return {durations.DURATIONS_OUT: str(out), durations.DURATIONS_SEEN: str(self._seen)}

    def keep(self) -> None:
        """Every part's seconds into the record (a part that ended before writing its own adds nothing). The
        concurrent part's go in last: a file with tests in a world and in the concurrent part (the Helm tests on a
        control plane of their own beside those on the node) is ordered by what it took in the concurrent part."""
        for _, out in sorted(self._parts.items(), key=lambda part: part[0] == "concurrent"):
            durations.add(durations.record_path(), durations.read(out))
        shutil.rmtree(self._directory, ignore_errors=True)


class WorldRun:
    """`pytest args` started in a world of its own (towline_dev.node.world), its output passed on line by
    line with a prefix while the concurrent part prints its own."""

    def __init__(self, name: str, args: Sequence[str], measured: Measured) -> None:
        self.name = name
        self._prefix = f"[{name}] "
        self._home = Path(tempfile.mkdtemp(prefix="towline-world-"))
        # Its own pytest temporary root and kubectl/Helm discovery cache: both clusters serve on the same
        # address (in different network namespaces), so a shared cache would mix their API lists.
        env = {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(self._home / "tmp"), "KUBECACHEDIR": str(self._home / "kube"),
               "PYTHONUNBUFFERED": "1",  # its lines as they come, not in blocks through the pipe
               **measured.env(name)}
        (self._home / "tmp").mkdir()
        self.started = time.monotonic()
        self.ended: float | None = None
        self._world = world.World([sys.executable, "-m", "pytest", *args], uplink=True, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self._world.process.stdout is not None
        self._relay = threading.Thread(target=self._pass_on, args=(self._world.process.stdout,), daemon=True)
        self._relay.start()

    def _pass_on(self, output: IO[bytes]) -> None:
        for line in output:
            sys.stdout.write(self._prefix + line.decode(errors="replace"))
            sys.stdout.flush()
        self.ended = time.monotonic()  # its pytest closed its output: it has ended

    def kill(self) -> None:
        """End the world at once (the suite itself failed): unshare kills it with everything in it."""
        self._world.kill()
        self.wait()

    def wait(self) -> tuple[int, float]:
        """Its exit status (5, nothing selected, counts as success) and wall time (to its pytest's end, however
        much later it is waited for)."""
        code = self._world.wait()
        self._relay.join()
        seconds = (self.ended or time.monotonic()) - self.started
        shutil.rmtree(self._home, ignore_errors=True)
        return (0 if code == 5 else code), seconds


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m tests.suite", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TOWLINE_TEST_WORKERS", DEFAULT_WORKERS)),
                        help=f"pytest-xdist workers for the concurrent part (default {DEFAULT_WORKERS}, "
                             "or $TOWLINE_TEST_WORKERS)")
    parser.add_argument("--random-order", action="store_true",
                        help="shuffle the concurrent part (pytest-randomly): no test may rely on another's leftovers")
    parser.add_argument("--only", choices=("concurrent", "exclusive"), help="run one part only")
    parser.add_argument("--one-after-the-other", action="store_true",
                        help="run the exclusive part on this machine after the concurrent part, "
                             "not in a world beside it")
    return parser.parse_known_args(argv)


def worlds_take_their_files(options: argparse.Namespace, selection: Sequence[str]) -> bool:
    """Whether tests.workers.IN_THE_WORLDS's files run in the worlds: only when the whole suite runs, both parts
    side by side, in the suite's own order."""
    return (list(selection) == ["tests"] and options.only is None and not options.one_after_the_other
            and not options.random_order)


def concurrent_marks(options: argparse.Namespace, selection: Sequence[str]) -> str:
    """The concurrent part's `-m`: not the exclusive tests, nor the files the worlds take."""
    if worlds_take_their_files(options, selection):
        return " and not ".join([CONCURRENT_MARKS, *IN_THE_WORLDS])
    return CONCURRENT_MARKS


def concurrent_part(options: argparse.Namespace, selection: Sequence[str], timings: dict[str, float],
                    measured: Measured) -> int:
    started = time.monotonic()
    with shared_node() as cluster:
        timings["shared node start"] = time.monotonic() - started
        env = {**os.environ, SHARED_NODE: str(cluster.state_dir), **measured.env("concurrent")}
        order = ["-p", "randomly"] if options.random_order else ["-p", "no:randomly"]
        began = time.monotonic()
        code = pytest(["-q", DURATIONS, *order, "-n", str(options.workers), "--dist", "loadfile",
                       "--no-loadscope-reorder",  # the files in LONGEST_FIRST's order (tests.workers)
                       "-m", concurrent_marks(options, selection), *selection], env)
        timings[f"concurrent part ({options.workers} workers)"] = time.monotonic() - began
    timings["concurrent part with node start and stop"] = time.monotonic() - started
    return code


def exclusive_worlds(options: argparse.Namespace, selection: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(name, pytest arguments) of each world the exclusive part runs in: two for the whole suite, each also
    running the files tests.workers.IN_THE_WORLDS gives it (a later `-m` replaces EXCLUSIVE's)."""
    if list(selection) != ["tests"]:
        return [("exclusive", [*EXCLUSIVE, *selection])]
    moved = worlds_take_their_files(options, selection)

    def marks(world: str) -> list[str]:
        return ["-m", f"exclusive or {world}"] if moved else []

    helm_files = IN_THE_WORLDS["helm_world"] if moved else ()  # the rest world's are under its "tests" already
    return [("exclusive: helm", [*EXCLUSIVE, *marks("helm_world"), EXCLUSIVE_SPLIT, *helm_files]),
            ("exclusive: rest", [*EXCLUSIVE, *marks("rest_world"), "tests", f"--ignore={EXCLUSIVE_SPLIT}"])]


def main(argv: Sequence[str] | None = None) -> int:
    options, rest = parse(sys.argv[1:] if argv is None else argv)
    selection = rest or ["tests"]
    if os.geteuid() != 0 or os.environ.get(ENVIRONMENT_VARIABLE):
        progress("no local node here (not root, or an existing cluster): one plain pytest run")
        return pytest(["-q", DURATIONS, "-p", "no:randomly", *selection])
    timings: dict[str, float] = {}
    codes: dict[str, int] = {}
    beside: list[WorldRun] = []
    measured = Measured()
    try:
        if options.only in (None, "exclusive") and not options.one_after_the_other:
            for name, args in exclusive_worlds(options, selection):
                beside.append(WorldRun(name, args, measured))
        if options.only in (None, "concurrent"):
            codes["concurrent"] = concurrent_part(options, selection, timings, measured)
    except BaseException:
        for run in reversed(beside):
            run.kill()
        raise
    # The last world made is waited for first: each puts back the forwarding it found, so the machine's own
    # comes back last (towline_dev.node.world.World.wait).
    for run in reversed(beside):
        codes[run.name], seconds = run.wait()
        timings[f"{run.name} part (own node, in a world of its own)"] = seconds
    if options.only in (None, "exclusive") and options.one_after_the_other:
        began = time.monotonic()
        codes["exclusive"] = pytest([*EXCLUSIVE, *selection], {**os.environ, **measured.env("exclusive")})
        timings["exclusive part (own node, after the concurrent part)"] = time.monotonic() - began
    measured.keep()
    for what, seconds in timings.items():
        progress(f"{what}: {seconds / 60:.1f} min ({seconds:.0f} s)")
    failed = {part: code for part, code in codes.items() if code}
    if failed:
        progress(f"failed: {', '.join(f'{part} (exit {code})' for part, code in failed.items())}")
    return max(failed.values(), default=0)


if __name__ == "__main__":
    raise SystemExit(main())

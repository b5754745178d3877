"""What the egress isolation check adds to a step, on the real node (needs root).

Runs `STEPS` step Jobs of the real runner image, one at a time, as the operator
builds them (`http.request` to a test host their policy allows), first with the
check on (the operator's default) and then off, and reports:
- the runner's own figure: runner start -> isolation proven (the wait before the action);
- Job created -> container terminated, with and without the check.
Prints figures; asserts nothing about time. Run: `python -m tests.bench.bench_isolation`.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.integration.isolationsupport import (
    DESTINATION,
    PROBE,
    finished,
    isolation_wait_seconds,
    load_runner_image,
    prepare_namespace,
    start_step,
)
from towline_dev.node.probehosts import ProbeHosts
from towline_dev.node.realnode import NodeCluster

STEPS = 10
NAMESPACE = "bench-isolation"


def _figures(label: str, samples: list[float]) -> None:
    p95 = statistics.quantiles(samples, n=20, method="inclusive")[18]
    print(f"  {label}: median {statistics.median(samples):.3f} s, p95 {p95:.3f} s, "
          f"min {min(samples):.3f} s, max {max(samples):.3f} s over {len(samples)}")


def main() -> None:
    if os.geteuid() != 0:
        print("bench_isolation: skipped (the real node needs root)")
        return
    cluster = NodeCluster(Path(tempfile.mkdtemp(prefix="towline-bench-isolation-"))).start()
    try:
        plane = cluster.plane
        assert plane is not None
        load_runner_image(cluster)
        run = prepare_namespace(plane, NAMESPACE)
        print(f"Egress isolation check (real node, kube-router; probe {PROBE})")
        with ProbeHosts([DESTINATION], Path(tempfile.mkdtemp(prefix="towline-bench-hosts-"))):
            waits: list[float] = []
            totals: dict[bool, list[float]] = {True: [], False: []}
            attempt = 0
            for checked in (True, False):
                for _ in range(STEPS):
                    attempt += 1
                    started = time.monotonic()
                    pod = start_step(plane, run, attempt, isolation_probe=PROBE if checked else None)
                    result, log = finished(plane, NAMESPACE, pod)
                    totals[checked].append(time.monotonic() - started)
                    wait = isolation_wait_seconds(log)
                    if checked:
                        if wait is None:
                            raise RuntimeError(f"the runner did not prove isolation: {result}")
                        waits.append(wait)
            _figures("runner start -> isolation proven (the added wait)", waits)
            _figures("step Job created -> terminated, check on", totals[True])
            _figures("step Job created -> terminated, check off", totals[False])
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

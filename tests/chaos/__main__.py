"""`python -m tests.chaos [--runs 100] [--kills 5] [--pauses 3] [--seed N] [--shards S --replicas R]` (`make chaos`):
the full form.

Starts a control plane with a real node (needs root; waits for the machine's node lock),
loads the runner image, runs the scenario (tests/chaos/scenario.py) and prints the counts
and every broken invariant. Exit status 1 when an invariant broke. Never part of `make test`.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
from pathlib import Path

from tests.chaos.scenario import ChaosSettings, run_chaos
from towline_dev.images import RUNNER_IMAGE, ensure_images
from towline_dev.node.realnode import NodeCluster


def _progress(message: str) -> None:
    print(f"[chaos] {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of the Lease holder")
    parser.add_argument("--pauses", type=int, default=3, help="SIGSTOPs of the Lease holder, past its renew deadline")
    parser.add_argument("--seed", type=int, default=None, help="replays a plan of disruptions (default: random)")
    parser.add_argument("--shards", type=int, default=1, help="operator.shards (the Lease holder is the runs' shard's)")
    parser.add_argument("--replicas", type=int, default=2, help="operator replicas")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
    settings = ChaosSettings(runs=args.runs, kills=args.kills, pauses=args.pauses, seed=seed, shards=args.shards,
                             replicas=args.replicas)
    work = Path(tempfile.mkdtemp(prefix="towline-chaos-"))
    _progress(f"seed {seed} (replay with --seed {seed}); operator logs in {work}")
    cluster = NodeCluster(progress=_progress)
    try:
        cluster.start()
        assert cluster.plane is not None and cluster.node is not None
        cluster.node.load_image(ensure_images(_progress)[RUNNER_IMAGE])
        report = run_chaos(cluster.plane, settings, work, log=_progress)
        print(report.table(), flush=True)
        healthy = cluster.plane.is_running() and cluster.node.is_running()
        violations = report.violations() + ([] if healthy else ["a control-plane or node component exited"])
        for line in violations:
            print(f"VIOLATION: {line}", flush=True)
        print(f"seed {seed}: {'invariants held' if not violations else f'{len(violations)} violations'}",
              flush=True)
        return 1 if violations else 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

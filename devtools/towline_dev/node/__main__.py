"""`python -m towline_dev.node [--image ARCHIVE ...]`: a control plane with a real node, in the foreground.

Prints how to point kubectl at it, then runs until Ctrl-C (or SIGTERM) and stops
everything, leaving nothing behind. Needs root.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from towline_dev.node.packages import NodeUnavailable
from towline_dev.node.realnode import NodeCluster


def _progress(message: str) -> None:
    print(f"[towline node] {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.node", description=__doc__)
    parser.add_argument("--image", action="append", type=Path, default=[],
                        help="an OCI archive to load into the node (repeatable)")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.image if not path.is_file()]
    if missing:
        parser.error(f"--image: no such file: {', '.join(missing)}")

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    cluster = NodeCluster(progress=_progress)
    try:
        cluster.start(images=args.image)
        assert cluster.plane is not None
        _progress(f"ready in {cluster.startup_seconds:.1f} s; in another shell:")
        print(f"export KUBECONFIG={cluster.plane.kubeconfig}", flush=True)
        while True:
            time.sleep(3600)
    except NodeUnavailable as error:
        _progress(f"cannot start the node: {error}")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        _progress("stopping")
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

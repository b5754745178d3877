"""`make binaries` (a step of `make test` and `make integration`): build what the tests need, visibly.

Run before pytest, so the first build's progress reaches the terminal line by line
(under pytest it would be captured until the session ends). When everything is
already built it says so in one line and returns at once.
"""

from __future__ import annotations

import sys
import time

from towline_dev.binaries import BinariesUnavailable, find_binaries


def _say(message: str) -> None:
    print(f"[towline build] {message}", flush=True)


def main() -> int:
    started = time.monotonic()
    try:
        binaries = find_binaries(progress=_say)
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    how = "built" if "just built" in binaries.origin else "cached"
    _say(f"Kubernetes binaries {how}: {binaries.origin} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m towline_dev.testoperator [--clock-file F] [--watch-retry-budget 1,1,2] --kubeconfig K`.

The operator exactly as `towline operator` runs it (same settings from the
environment, same code), with what only tests may change, passed in as
arguments of `towline.cli.run_operator` that the shipped command line never
offers:

- `--clock-file`: schedules run on `fakeclock.FileClock`, moved by the test;
- `--watch-retry-budget`: kopf's backoffs between attempts of one API request
  (its `networking.error_backoffs`; the operator repeats the last one for as long
  as it takes), so an outage longer than the whole list takes seconds instead of
  a minute.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from towline.cli import run_operator, watch_namespaces_from
from towline_dev.fakeclock import FileClock

if TYPE_CHECKING:  # kopf is imported by towline.runtime.wiring, which keeps kubernetes-asyncio's client out
    import kopf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.testoperator")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--clock-file", type=Path, default=None)
    parser.add_argument("--watch-retry-budget", default="", help="seconds between attempts, comma-separated")
    parsed = parser.parse_args(argv)
    backoffs = tuple(float(seconds) for seconds in parsed.watch_retry_budget.split(",") if seconds.strip())

    def adjust(settings: kopf.OperatorSettings) -> None:
        if backoffs:
            settings.networking.error_backoffs = backoffs

    return run_operator(
        parsed.kubeconfig, os.environ.get("TOWLINE_LOG_LEVEL", "info"),
        watch_namespaces_from(os.environ.get("TOWLINE_WATCH_NAMESPACES", "")),
        os.environ.get("TOWLINE_LOG_FORMAT", "text"),
        clock=FileClock(parsed.clock_file) if parsed.clock_file else None, adjust=adjust,
    )


if __name__ == "__main__":
    raise SystemExit(main())

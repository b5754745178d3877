"""Which runs `kubectl towline runs` (and Approvals `kubectl towline approvals`) shows: flag values checked,
then the list narrowed. Pure.

The label selector goes to the API server; phase, workflow, age and count are
applied here, on what came back (the server cannot select on status).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import get_args

from towline.api.runterms import RunPhase
from towline.jsontypes import JSON
from towline_connectors.wire import parse_rfc3339

PHASES: tuple[str, ...] = get_args(RunPhase)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+)([smhdw])")


def duration(text: str) -> timedelta:
    """`90s`, `10m`, `2h`, `1d`, `1w`, or several run together (`1h30m`); argparse's `type=` for --since."""
    if not text or _DURATION.sub("", text.strip()) != "" or not _DURATION.search(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; use a number and a unit, e.g. 10m, 2h, 1d")
    seconds = sum(int(number) * _UNITS[unit] for number, unit in _DURATION.findall(text))
    if seconds == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is zero; use a positive duration, e.g. 10m")
    return timedelta(seconds=seconds)


def positive(text: str) -> int:
    """argparse's `type=` for --last: a whole number from 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number; use e.g. --last 5")
    return int(text)


def phases(values: list[str]) -> set[str]:
    """Repeated and comma-separated --phase values, case as the API spells them; raises on an unknown one."""
    wanted: set[str] = set()
    spelled = {phase.lower(): phase for phase in PHASES}
    for value in values:
        for part in filter(None, (piece.strip() for piece in value.split(","))):
            if part.lower() not in spelled:
                raise argparse.ArgumentTypeError(
                    f"unknown phase {part!r}; use one or more of {', '.join(PHASES)}")
            wanted.add(spelled[part.lower()])
    return wanted


@dataclass(frozen=True)
class RunFilter:
    phases: frozenset[str] = frozenset()
    workflow: str | None = None
    since: timedelta | None = None
    last: int | None = None

    def apply(self, runs: list[JSON], now: datetime) -> list[JSON]:
        """The matching runs, oldest first; with `last`, only the newest N of them."""
        kept = []
        for run in runs:
            spec, status = run.get("spec") or {}, run.get("status") or {}
            if self.phases and status.get("phase", "Pending") not in self.phases:
                continue
            if self.workflow is not None and workflow_of(spec) != self.workflow:
                continue
            if self.since is not None and not _created_within(run, now - self.since):
                continue
            kept.append(run)
        kept.sort(key=created_key)
        return kept[-self.last:] if self.last else kept


def workflow_of(spec: JSON) -> str | None:
    """The Workflow a run runs (spec.workflowRef.name) or an Approval's run runs (spec.workflowName)."""
    name = (spec.get("workflowRef") or {}).get("name") or spec.get("workflowName")
    return str(name) if name else None


def created_key(run: JSON) -> tuple[str, str, str]:
    meta = run["metadata"]
    return meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta.get("name") or ""


def _created_within(run: JSON, cutoff: datetime) -> bool:
    created = run["metadata"].get("creationTimestamp")
    return bool(created) and parse_rfc3339(created) >= cutoff

"""`kubectl towline delete`: runs by name, or the ended runs a selection picks (label, Workflow, phase, age,
all but the newest N of each Workflow).

What argo does and what this does: `argo delete NAME` deletes a workflow whatever its state, and
`argo delete --older/--completed` pick finished workflows only. Here a selection also picks only runs that
have ended (Succeeded, Failed, Cancelled): a run cut off mid-way loses its `finally` steps and
compensations, since its Jobs and Approvals go with it. A run that has not ended is deleted only when
named with `--force`; cancel it first to let it end cleanly.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from towline.api.runterms import TERMINAL_RUN_PHASES
from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin import filters
from towline.plugin.commands import Io, NotFound
from towline.plugin.completion import complete_with
from towline.plugin.manifests import UsageError
from towline_connectors.wire import parse_rfc3339

ENDED: tuple[str, ...] = tuple(phase for phase in filters.PHASES if phase in TERMINAL_RUN_PHASES)

EXAMPLES = """Examples:
  kubectl towline delete release-x7k2p release-q9w8e   # these runs (ended ones; --force for one still going)
  kubectl towline delete --keep 10                     # all but each Workflow's newest 10 ended runs
  kubectl towline delete -A --phase Failed --older-than 7d --dry-run   # what it would delete, everywhere
  kubectl towline delete -w nightly --older-than 30d
  kubectl towline delete -l tier=gold --phase Succeeded,Cancelled"""


def add_parser(sub: Any) -> None:
    text = "delete runs by name, or the ended runs a selection picks"
    parser: argparse.ArgumentParser = sub.add_parser(
        "delete", help=text, description=text[0].upper() + text[1:] + ".", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", metavar="RUN")
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="select in every namespace you may list (not with RUN names)")
    parser.add_argument("-l", "--selector", default=None, metavar="SELECTOR",
                        help="label selector, passed to the API server (e.g. towline.dev/workflow=nightly)")
    parser.add_argument("-w", "--workflow", default=None, help="only runs of this workflow")
    phase = parser.add_argument("--phase", action="append", default=[], type=_ended_phase, metavar="PHASE[,PHASE]",
                                help=f"only runs that ended so (repeatable): {', '.join(ENDED)}")
    complete_with(phase, ENDED)
    parser.add_argument("--older-than", type=filters.duration, default=None, metavar="DURATION",
                        help="only runs that ended more than DURATION ago (e.g. 7d, 12h)")
    parser.add_argument("--keep", type=_keep, default=None, metavar="N",
                        help="keep the newest N selected runs of each Workflow, delete the rest")
    parser.add_argument("--dry-run", action="store_true", help="print what it would delete, delete nothing")
    parser.add_argument("--force", action="store_true", help="with RUN names: also a run that has not ended")


def _ended_phase(text: str) -> frozenset[str]:
    wanted = filters.phases([text])
    going = sorted(wanted - set(ENDED))
    if going:
        raise argparse.ArgumentTypeError(
            f"{', '.join(going)}: delete selects only ended runs ({', '.join(ENDED)}); "
            "to delete one still going, name it with --force")
    return frozenset(wanted)


def _keep(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; use e.g. --keep 10 (0 keeps none)")
    return int(text)


@dataclass(frozen=True)
class Selection:
    """Which ended runs a `delete` without names picks. Pure."""

    phases: frozenset[str] = frozenset()
    workflow: str | None = None
    older_than: timedelta | None = None
    keep: int | None = None

    def pick(self, runs: list[JSON], now: datetime) -> list[JSON]:
        """The runs to delete, oldest first: ended, in `phases`, of `workflow`, ended before `now - older_than`,
        and not among the newest `keep` of their Workflow (per namespace) that passed the other filters."""
        chosen = filters.RunFilter(phases=self.phases or frozenset(ENDED), workflow=self.workflow).apply(runs, now)
        if self.keep is not None:
            kept: set[tuple[str, str]] = set()
            seen: dict[tuple[str, str | None], int] = {}
            for run in reversed(chosen):  # newest first
                group = (run["metadata"].get("namespace") or "", filters.workflow_of(run.get("spec") or {}))
                seen[group] = seen.get(group, 0) + 1
                if seen[group] <= self.keep:
                    kept.add(_key(run))
            chosen = [run for run in chosen if _key(run) not in kept]
        if self.older_than is not None:
            cutoff = now - self.older_than
            chosen = [run for run in chosen if ended_at(run) < cutoff]
        return chosen


def ended_at(run: JSON) -> datetime:
    """When a run ended (status.finishedAt); a run that ended without starting: when it was created."""
    status = run.get("status") or {}
    return parse_rfc3339(status.get("finishedAt") or run["metadata"]["creationTimestamp"])


def _key(run: JSON) -> tuple[str, str]:
    return run["metadata"].get("namespace") or "", run["metadata"]["name"]


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line, if anything (the parser reports it, exit 2)."""
    selecting = bool(args.selector or args.workflow or args.phase or args.older_than or args.keep is not None)
    if args.runs and (selecting or args.all_namespaces):
        return ("delete takes RUN names or a selection (-l, -w, --phase, --older-than, --keep, -A), not both: "
                "kubectl towline delete RUN... or kubectl towline delete --phase Failed")
    if not args.runs and not selecting:
        return ("delete needs RUN names or a selection: e.g. kubectl towline delete --keep 10, "
                "or --older-than 7d, --phase Failed, -l SELECTOR, -w WORKFLOW")
    if args.force and not args.runs:
        return "--force applies to runs named on the command line only: kubectl towline delete RUN --force"
    return None


async def delete(api: KubeApi, namespace: str | None, io: Io, args: argparse.Namespace, now: datetime) -> int:
    """Delete the named runs, or those the selection picks; `namespace` None: every namespace (-A)."""
    if args.runs:
        assert namespace is not None
        targets = await _named(api, namespace, args.runs, force=args.force)
    else:
        listed = await session.list_runs(api, namespace, selector=args.selector)
        selection = Selection(phases=frozenset().union(*args.phase), workflow=args.workflow,
                              older_than=args.older_than, keep=args.keep)
        targets = selection.pick(listed, now)
        if not targets:
            io.err("no ended run matches; nothing deleted")
            return 0
    for run in targets:
        run_namespace, name = _key(run)
        where = f" in namespace {run_namespace}" if namespace is None else ""
        if args.dry_run:
            io.out(f"workflowrun/{name}{where} deleted (dry run)")
        elif await session.delete_run(api, run_namespace, name):
            io.out(f"workflowrun/{name}{where} deleted")
        else:
            io.err(f"workflowrun/{name}{where} was gone already")
    return 0


async def _named(api: KubeApi, namespace: str, names: list[str], *, force: bool) -> list[JSON]:
    """The named runs, each checked before any is deleted: it exists, and it has ended unless `force`."""
    runs = []
    for name in dict.fromkeys(names):
        run = await session.get_run(api, namespace, name)
        if run is None:
            raise NotFound(f"no WorkflowRun {name!r} in namespace {namespace}; nothing deleted "
                             "(list them with `kubectl towline runs`)")
        phase = (run.get("status") or {}).get("phase", "Pending")
        if phase not in TERMINAL_RUN_PHASES and not force:
            raise UsageError(f"run {name} is {phase}, it has not ended; nothing deleted. Cancel it first "
                             f"(kubectl towline cancel {name}) or delete it as it is with --force")
        runs.append({**run, "metadata": {**run["metadata"], "namespace": namespace}})
    return runs

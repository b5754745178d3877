"""The live commands' arguments and dispatch: `logs [-f]`, `watch`, `approvals`, `approve|reject`.

cli.py adds these parsers with `add_parsers` and takes their calls from `calls`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin import approvals, commands, filters, follow, history, output

Call = Callable[[], Awaitable[int]]

_EXAMPLES = {
    "logs": """Examples:
  kubectl towline logs release-x7k2p                 # every step's log so far
  kubectl towline logs release-x7k2p check           # one step's
  kubectl towline logs -f release-x7k2p              # follow each step as it starts, until the run ends
  kubectl towline logs release-x7k2p --tail 20 --timestamps   # each pod's last 20 lines, with their times
  kubectl towline logs release-x7k2p deploy --since 10m       # what step deploy printed in the last 10 minutes
  kubectl towline logs release-x7k2p build -c prepare         # a step type's prepare init container""",
    "watch": """Examples:
  kubectl towline watch release-x7k2p && echo released   # exit 0 only if the run succeeded""",
    "approvals": """Examples:
  kubectl towline approvals                          # pending in this namespace
  kubectl towline approvals --mine -A                # those you may decide, in every namespace
  kubectl towline approvals --workflow release -o wide   # with each run's Workflow and requester
  kubectl towline approvals --since 1h -o name       # approval/NAME lines, for scripts""",
    "approve": """Examples:
  kubectl towline approve release-x7k2p review       # the run's gate at step review
  kubectl towline approve release-x7k2p              # the run's one pending gate
  kubectl towline approve release-x7k2p-review --reason "checked the diff"   # an Approval by name""",
}


CONTAINERS = ("step", "prepare")


def _lines(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of lines; use e.g. --tail 20")
    return int(text)


def log_query(args: argparse.Namespace) -> dict[str, str]:
    """The log API's parameters for `logs --tail/--since/--timestamps/-c` (none: the whole log of the step's own
    container, the pod's only non-init container)."""
    query: dict[str, str] = {}
    if args.tail is not None:
        query["tailLines"] = str(args.tail)
    if args.since is not None:
        query["sinceSeconds"] = str(int(args.since.total_seconds()))
    if args.timestamps:
        query["timestamps"] = "true"
    if args.container == "prepare":
        query["container"] = "prepare"
    return query


def _parser(sub: Any, name: str, text: str, examples: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=text, description=text, epilog=examples, formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def add_parsers(sub: Any) -> None:
    """Add `logs`, `watch`, `approvals`, `approve` and `reject` to the subcommands `sub`."""
    logs = _parser(sub, "logs", "the step pods' logs of RUN (or of one STEP)", _EXAMPLES["logs"])
    logs.add_argument("run")
    logs.add_argument("step", nargs="?")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="stream each step's log as it runs, lines prefixed with the step id, until the run ends")
    logs.add_argument("--tail", type=_lines, default=None, metavar="N", help="only each pod's last N lines")
    logs.add_argument("--since", type=filters.duration, default=None, metavar="DURATION",
                      help="only lines written within DURATION (e.g. 10m, 2h)")
    logs.add_argument("--timestamps", action="store_true", help="each line with the time it was written (RFC 3339)")
    logs.add_argument("-c", "--container", choices=CONTAINERS, default="step",
                      help="step: the step's own container (default); prepare: a step type's prepare init container")

    _parser(sub, "watch", "print each phase and current-step change of RUN until it ends; exit 0 iff it succeeded",
            _EXAMPLES["watch"]).add_argument("run")

    listing = _parser(sub, "approvals", "pending Approvals: run, step, approvers, age, expiry, message",
                      _EXAMPLES["approvals"])
    listing.add_argument("--mine", action="store_true",
                         help="only those you may decide (the admission policy's own rule, with your groups)")
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="in every namespace you may list")
    listing.add_argument("-l", "--selector", default=None, metavar="SELECTOR",
                         help="label selector, passed to the API server (e.g. towline.dev/workflow=release)")
    listing.add_argument("-w", "--workflow", default=None, help="only approvals of runs of this workflow")
    listing.add_argument("--since", type=filters.duration, default=None, metavar="DURATION",
                         help="only approvals opened within DURATION (e.g. 10m, 2h, 1d)")
    listing.add_argument("--last", type=filters.positive, default=None, metavar="N",
                         help="only the newest N (after the other filters)")
    listing.add_argument("-o", "--output", choices=output.FORMATS, default=None,
                         help="json/yaml: the Approvals as a List; name: approval/NAME; "
                              "wide: adds WORKFLOW and REQUESTED BY")

    for verb in ("approve", "reject"):
        decide = _parser(sub, verb, f"{verb} a run's gate (RUN STEP, or RUN with one pending gate) or an Approval "
                         "by name, as yourself", _EXAMPLES["approve"].replace("approve ", f"{verb} "))
        decide.add_argument("name", metavar="RUN|APPROVAL")
        decide.add_argument("step", nargs="?", metavar="STEP")
        decide.add_argument("--reason", default=None)


async def _require_run(api: KubeApi, namespace: str, name: str) -> None:
    if await session.get_run(api, namespace, name) is None:
        raise commands.NotFound(f"no WorkflowRun {name!r} in namespace {namespace}; "
                                "list them with `kubectl towline runs`")


def calls(api: KubeApi, namespace: str, io: commands.Io, args: argparse.Namespace) -> dict[str, Call]:
    """The dispatch entries of the commands `add_parsers` added."""

    def out(text: str) -> None:
        io.out(text)
        sys.stdout.flush()  # a pipe (`| grep`) sees each line as it comes

    async def logs() -> int:
        query = log_query(args)
        if args.follow:
            await _require_run(api, namespace, args.run)
            return await follow.follow_logs(api, namespace, args.run, args.step, out=out, err=io.err, query=query)
        live = await session.get_run(api, namespace, args.run)
        if live is None or not await session.step_pods(api, namespace, args.run, args.step):
            # The run was pruned or its pods went with their Jobs' TTL: the archive keeps what they printed.
            if query:
                io.err("note: --tail, --since, --timestamps and -c apply to step pods; the archive's copy is whole")
            return await history.archived_logs(api, namespace, io, args.run, args.step, run_exists=live is not None)
        return await commands.logs(api, namespace, io, args.run, args.step, query=query)

    async def watch() -> int:
        await _require_run(api, namespace, args.run)
        return await follow.watch_run(api, namespace, args.run, out, io.err)

    def decide(decision: str) -> Call:
        async def call() -> int:
            name = await approvals.resolve(api, namespace, args.name, args.step)
            return await commands.decide(api, namespace, io, approval=name, decision=decision, reason=args.reason)
        return call

    return {
        "logs": logs,
        "watch": watch,
        "approvals": lambda: approvals.list_pending(
            api, None if args.all_namespaces else namespace, io, only_mine=args.mine, selector=args.selector,
            narrow=filters.RunFilter(workflow=args.workflow, since=args.since, last=args.last), form=args.output),
        "approve": decide("Approved"),
        "reject": decide("Rejected"),
    }

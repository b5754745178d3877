"""`kubectl towline deadletters [replay ID... | replay --all]`: what Towline could not deliver or start.

KIND `event`: the CloudEvents the events sink could not deliver. KIND `delivery`: the webhook deliveries the ingress
refused after their signature checked, kept in the namespace's ConfigMap towline-dead-letters
(towline.k8s.deliveryletters). KIND `run`: the namespace's runs that failed before their first step, live or archived
(towline.plugin.runletters; its ID is the run's name). Replaying a delivery or a run starts one run as the person who
asks (towline.plugin.replaying, which the web view's Replay button shares).

Events are kept in the ConfigMap towline-event-dead-letters of the operator's namespace (towline.k8s.deadletters), so
who may see and replay them is RBAC's: get (list) and update (replay) on that ConfigMap, which the chart gives no
team role. Replay asks the operator to send them again (it holds the signing secret; this command never does):
the operator takes each letter out of the ConfigMap and sends it with its original id, once. `replay_events` is
that request, shared with the web view's Dead letters page.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from towline.api.events import DeadLetter
from towline.k8s.client import ApiError, KubeApi
from towline.k8s.deadletters import DEAD_LETTERS_CONFIG_MAP, read_dead_letters, request_replay
from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP, DeliveryLetter
from towline.plugin.commands import Io, NotFound
from towline.plugin.manifests import UsageError
from towline.plugin.replaying import ReplayRefused, namespace_letters, replay_letter
from towline.plugin.runletters import RunLetter

DEFAULT_OPERATOR_NAMESPACE = "towline-system"
EXAMPLES = """Examples:
  kubectl towline deadletters                      # the events the sink refused or never answered
  kubectl towline deadletters -o json | jq '.items[].event.type'
  kubectl towline deadletters replay 3f2a9c...     # send one again, with its original id
  kubectl towline deadletters replay --all
  kubectl towline deadletters -n shop              # also the deliveries the ingress refused in namespace shop
  kubectl towline deadletters -A                   # ... in every namespace you may read them in
  kubectl towline deadletters -n shop replay 9c1e... # one new run from a refused delivery, as you
  kubectl towline deadletters -n shop replay orders-x7k2p  # a run that failed before its first step, again
  kubectl towline deadletters --operator-namespace towline   # a release installed elsewhere"""


def add_parser(sub: Any) -> None:
    text = "list what Towline could not deliver or start (events, deliveries, runs), or replay it"
    parser: argparse.ArgumentParser = sub.add_parser(
        "deadletters", help=text, description=text[0].upper() + text[1:] + ".", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verb", nargs="?", choices=("list", "replay"), default="list", metavar="replay",
                        help="replay: send the named letters (or --all) again")
    parser.add_argument("ids", nargs="*", metavar="ID", help="with replay: the letters' ids")
    parser.add_argument("--all", action="store_true", help="with replay: every letter kept")
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="refused deliveries and runs of every namespace you may read them in")
    parser.add_argument("-o", "--output", choices=("json",), default=None, help="json: the letters as a List")
    parser.add_argument("--operator-namespace", default=DEFAULT_OPERATOR_NAMESPACE,
                        help="the namespace Towline's operator runs in (default: %(default)s)")


def letter_document(letter: DeadLetter) -> dict[str, Any]:
    return {"id": letter.id, "kind": "event", "attempts": letter.attempts, "error": letter.error,
            "failedAt": letter.failed_at, "event": letter.event}


@dataclass(frozen=True)
class EventReplay:
    """The events sink's letters handed to the operator to send again (none: nothing was kept)."""

    operator_namespace: str
    letters: list[DeadLetter]

    @property
    def message(self) -> str:
        if not self.letters:
            return f"no dead letters in {self.operator_namespace} to replay"
        ids = ", ".join(letter.id for letter in self.letters)
        return f"{len(self.letters)} dead letter(s) handed to the operator to send again: {ids}"


async def replay_events(api: KubeApi, operator_namespace: str, ids: list[str] | None) -> EventReplay:
    """`replay ID...` (None: `--all`) of the events sink's letters, as the caller: the annotation the operator acts
    on (towline.k8s.deadletters.request_replay), which takes update on the ConfigMap. Raises LookupError naming an id
    that is not kept, ApiError with the API server's refusal."""
    return EventReplay(operator_namespace, await request_replay(api, operator_namespace, ids))


async def run(api: KubeApi, io: Io, args: argparse.Namespace, namespace: str) -> int:
    try:
        return await _run(api, io, args, namespace)
    except ApiError as error:
        io.err(f"error: {error.status}: {error.message}")
        return 1


async def _run(api: KubeApi, io: Io, args: argparse.Namespace, namespace: str) -> int:
    operator_namespace = args.operator_namespace
    if args.verb == "list":
        if args.ids or args.all:
            raise UsageError("ids and --all go with replay: kubectl towline deadletters replay ID | --all")
        letters = await _event_letters(api, io, operator_namespace)
        deliveries, runs = await namespace_letters(api, None if args.all_namespaces else namespace)
        if args.output == "json":
            items = [*(letter_document(letter) for letter in letters), *(d.document() for d in deliveries),
                     *(r.document() for r in runs)]
            io.out(json.dumps({"kind": "List", "items": items}, indent=2))
        elif not letters and not deliveries and not runs:
            io.err(f"no dead letters in {operator_namespace} (ConfigMap {DEAD_LETTERS_CONFIG_MAP}) nor in "
                   f"{'any namespace' if args.all_namespaces else namespace} (ConfigMap {DELIVERY_LETTERS_CONFIG_MAP}, "
                   "or a run that failed before its first step)")
        else:
            io.out(table(letters, deliveries, runs))
        return 0
    if bool(args.ids) == args.all:
        raise UsageError("replay takes the letters' ids or --all (kubectl towline deadletters lists them)")
    if args.ids and len(args.ids) == 1:
        try:
            replayed = await replay_letter(api, namespace, args.ids[0])
        except ReplayRefused as refused:
            io.err(f"error: {refused}")
            return 1
        if replayed is not None:
            io.out(replayed.message)
            return 0
    try:
        asked = await replay_events(api, operator_namespace, None if args.all else list(args.ids))
    except LookupError as missing:
        raise NotFound(f"{missing}, nor a refused delivery or a failed run in namespace {namespace} "
                       "(pass -n NAMESPACE)") from None
    (io.out if asked.letters else io.err)(asked.message)
    return 0


async def _event_letters(api: KubeApi, io: Io, operator_namespace: str) -> list[DeadLetter]:
    """The events sink's letters; none (said on stderr) for a person who may not read the operator's namespace."""
    try:
        return await read_dead_letters(api, operator_namespace)
    except ApiError as error:
        if error.status != 403:
            raise
        io.err(f"(the events sink's dead letters in {operator_namespace} are not yours to read: skipped)")
        return []


def table(letters: list[DeadLetter], deliveries: list[DeliveryLetter] | None = None,
          runs: list[RunLetter] | None = None) -> str:
    rows = [("KIND", "ID", "NAMESPACE", "WHAT", "FAILED", "REPLAYED", "ERROR")]
    for letter in letters:
        error = f"{letter.error} (attempts: {letter.attempts})"
        rows.append(("event", letter.id, "", f"{letter.event.get('type', '')} {letter.event.get('subject', '')}",
                     letter.failed_at, "", error))
    for delivery in deliveries or []:
        rows.append((delivery.kind, delivery.id, delivery.namespace, f"{delivery.workflow}/{delivery.trigger}",
                     delivery.failed_at, delivery.replay_run or "", delivery.reason))
    for run in runs or []:
        trigger = run.trigger.get("name") or run.trigger.get("type") or "manual"
        rows.append((run.kind, run.id, run.namespace, f"{run.workflow}/{trigger}" + (" (archived)" if run.archived
                     else ""), run.failed_at, run.replay_run or "", run.reason))
    rows = [(*row[:-1], row[-1] if len(row[-1]) <= 80 else row[-1][:77] + "...") for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "   " + row[-1]
             for row in rows]
    return "\n".join(line.rstrip() for line in lines)

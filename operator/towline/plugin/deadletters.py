"""`kubectl towline deadletters [replay ID... | replay --all]`: the CloudEvents the events sink could not deliver.

They are kept in the ConfigMap towline-event-dead-letters of the operator's namespace (towline.k8s.deadletters), so
who may see and replay them is RBAC's: get (list) and update (replay) on that ConfigMap, which the chart gives no
team role. Replay asks the operator to send them again (it holds the signing secret; this command never does):
the operator takes each letter out of the ConfigMap and sends it with its original id, once.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from towline.api.events import DeadLetter
from towline.k8s.client import KubeApi
from towline.k8s.deadletters import DEAD_LETTERS_CONFIG_MAP, read_dead_letters, request_replay
from towline.plugin.commands import Io, NotFound
from towline.plugin.manifests import UsageError

DEFAULT_OPERATOR_NAMESPACE = "towline-system"
EXAMPLES = """Examples:
  kubectl towline deadletters                      # the events the sink refused or never answered
  kubectl towline deadletters -o json | jq '.items[].event.type'
  kubectl towline deadletters replay 3f2a9c...     # send one again, with its original id
  kubectl towline deadletters replay --all
  kubectl towline deadletters --operator-namespace towline   # a release installed elsewhere"""


def add_parser(sub: Any) -> None:
    text = "list the CloudEvents the events sink did not take, or replay them"
    parser: argparse.ArgumentParser = sub.add_parser(
        "deadletters", help=text, description=text[0].upper() + text[1:] + ".", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verb", nargs="?", choices=("list", "replay"), default="list", metavar="replay",
                        help="replay: send the named letters (or --all) again")
    parser.add_argument("ids", nargs="*", metavar="ID", help="with replay: the letters' ids")
    parser.add_argument("--all", action="store_true", help="with replay: every letter kept")
    parser.add_argument("-o", "--output", choices=("json",), default=None, help="json: the letters as a List")
    parser.add_argument("--operator-namespace", default=DEFAULT_OPERATOR_NAMESPACE,
                        help="the namespace Towline's operator runs in (default: %(default)s)")


def letter_document(letter: DeadLetter) -> dict[str, Any]:
    return {"id": letter.id, "attempts": letter.attempts, "error": letter.error, "failedAt": letter.failed_at,
            "event": letter.event}


async def run(api: KubeApi, io: Io, args: argparse.Namespace) -> int:
    namespace = args.operator_namespace
    if args.verb == "list":
        if args.ids or args.all:
            raise UsageError("ids and --all go with replay: kubectl towline deadletters replay ID | --all")
        letters = await read_dead_letters(api, namespace)
        if args.output == "json":
            io.out(json.dumps({"kind": "List", "items": [letter_document(letter) for letter in letters]}, indent=2))
        elif not letters:
            io.err(f"no dead letters in {namespace} (ConfigMap {DEAD_LETTERS_CONFIG_MAP})")
        else:
            io.out(table(letters))
        return 0
    if bool(args.ids) == args.all:
        raise UsageError("replay takes the letters' ids or --all (kubectl towline deadletters lists them)")
    try:
        asked = await request_replay(api, namespace, None if args.all else list(args.ids))
    except LookupError as missing:
        raise NotFound(str(missing)) from None
    if not asked:
        io.err(f"no dead letters in {namespace} to replay")
        return 0
    ids = ", ".join(letter.id for letter in asked)
    io.out(f"{len(asked)} dead letter(s) handed to the operator to send again: {ids}")
    return 0


def table(letters: list[DeadLetter]) -> str:
    rows = [("ID", "TYPE", "SUBJECT", "ATTEMPTS", "FAILED", "ERROR")]
    for letter in letters:
        error = letter.error if len(letter.error) <= 80 else letter.error[:77] + "..."
        rows.append((letter.id, str(letter.event.get("type", "")), str(letter.event.get("subject", "")),
                     str(letter.attempts), letter.failed_at, error))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "   " + row[-1]
             for row in rows]
    return "\n".join(lines)

"""`towline connectors`: list the built-in actions, or export their JSON Schemas.

Reads only the registry's declarations; it must never run an action.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from towline_connectors.registry import json_schemas, list_actions
from towline_connectors.spec import ActionSpec

_COLUMNS = ("ACTION", "MUTATES", "IDEMPOTENCY", "CREDENTIAL", "RETRY", "SUMMARY")


def _row(spec: ActionSpec) -> tuple[str, ...]:
    mutates = "by method" if spec.mutating_for is not None else ("yes" if spec.mutating else "no")
    if spec.credential is None:
        credential = "-"
    else:
        credential = spec.credential.type + (" (optional)" if spec.credential.optional else "")
    retry = spec.default_retry
    retry_text = f"{retry.limit}x {retry.backoff}" if retry.limit else "none"
    return (spec.name, mutates, spec.idempotency, credential, retry_text, spec.summary)


def format_table() -> str:
    """A plain-text table of every action, widest cell per column, like kubectl's."""
    rows = [_COLUMNS, *(_row(spec) for spec in list_actions())]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
    lines = ["   ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]) for row in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="towline connectors", description="List the built-in connector actions.")
    parser.add_argument("--json", action="store_true", help="print the input/output JSON Schemas instead")
    args = parser.parse_args(argv)
    if args.json:
        sys.stdout.write(json.dumps(json_schemas(), indent=2) + "\n")
    else:
        sys.stdout.write(format_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

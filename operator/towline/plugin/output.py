"""`-o json|yaml|name`: objects as the API server returned them, like `kubectl get -o ...`. Pure.

A list prints as a `v1` List (what `kubectl get -o json` prints for several
objects); `name` prints `kind/NAME` lines (`workflowrun/nightly-x7k2p`). Only
what the API server returned is printed: runs carry no Secret values (a run's
status is written by the operator from redacted step results).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from towline.jsontypes import JSON

MACHINE_FORMATS = ("json", "yaml", "name")
FORMATS = ("json", "yaml", "name", "wide")


def as_list(items: list[JSON]) -> JSON:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def name_of(obj: JSON) -> str:
    """`workflowrun/NAME`: kind in lower case, as kubectl's `-o name` prints custom resources' short form."""
    return f"{str(obj.get('kind') or 'workflowrun').lower()}/{obj['metadata']['name']}"


def dump(document: Any, form: str) -> str:
    if form == "json":
        return json.dumps(document, indent=2, sort_keys=False)
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip("\n")


def objects(items: list[JSON], form: str, *, single: bool = False) -> str:
    """`items` in a machine format; `single` prints the one object itself rather than a List."""
    if form == "name":
        return "\n".join(name_of(item) for item in items)
    if single and len(items) == 1:
        return dump(items[0], form)
    return dump(as_list(items), form)

"""What an archived run keeps (archive.towline.dev ArchivedRun: an item of the archive's listing, or its answer for
one run): its record, and the WorkflowRun in that record, read leniently (an entry of another shape reads as empty).

Light on purpose (towline.lenient only): the display model (towline.plugin.runtree) draws a kept run from here
without loading the archive's client (towline.plugin.history), which itself imports the display model's renderers.
"""

from __future__ import annotations

from typing import Any

from towline.jsontypes import JSON
from towline.lenient import as_mapping


def kept_record(entry: Any) -> JSON:
    """The record an archived run's entry keeps (an item of the archive's listing, or its answer for one run)."""
    return as_mapping(as_mapping(entry).get("record"))


def kept_run(entry: Any) -> JSON:
    """The run object as the archive recorded it, from an archived run's entry; empty if it keeps none."""
    return as_mapping(kept_record(entry).get("run"))

"""The history query: filters to SQL, and the continue token that pages through it.

Pages are keyset pages over (started_us, seq), newest first, so page N costs what page 1 costs and a run
archived meanwhile never shifts a page. The workflow filter walks the (namespace, workflow, started_us,
seq) index backwards; a time range bounds that walk.
"""

from __future__ import annotations

import base64
import binascii
import json

from towline.archive.db import Param, Row
from towline.archive.records import ArchivedRun, ArchiveError, Entry, HistoryQuery, from_micros, micros

MAX_LIMIT = 1000
TOKEN_VERSION = 1

RUN_COLUMNS = "r.uid, r.name, r.workflow, r.phase, r.requester, r.started_us, r.finished_us"

RUN_BY_UID = ("SELECT " + RUN_COLUMNS + ", {entry_columns} FROM runs r JOIN entries e "
              "ON e.namespace = r.namespace AND e.seq = r.seq WHERE r.namespace = ? AND r.uid = ?")
RUN_BY_NAME = ("SELECT " + RUN_COLUMNS + ", {entry_columns} FROM runs r JOIN entries e "
               "ON e.namespace = r.namespace AND e.seq = r.seq WHERE r.namespace = ? AND r.name = ? "
               "ORDER BY r.started_us DESC, r.seq DESC LIMIT 1")


def history_sql(query: HistoryQuery, *, entry_columns: str) -> tuple[str, list[Param]]:
    """The statement for one page (it asks for limit + 1 rows: one more says there is a next page)."""
    if not 1 <= query.limit <= MAX_LIMIT:
        raise ArchiveError(f"limit {query.limit}: ask for 1 to {MAX_LIMIT} runs per page")
    where = ["r.namespace = ?"]
    params: list[Param] = [query.namespace]
    for column, value in (("r.workflow", query.workflow), ("r.requester", query.requester),
                          ("r.phase", query.phase)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if query.started_from is not None:
        where.append("r.started_us >= ?")
        params.append(micros(query.started_from))
    if query.started_before is not None:
        where.append("r.started_us < ?")
        params.append(micros(query.started_before))
    if query.approver is not None:
        where.append("EXISTS (SELECT 1 FROM approvers a WHERE a.namespace = r.namespace AND a.run_uid = r.uid "
                     "AND a.approver = ?)")
        params.append(query.approver)
    for name, value in sorted(query.labels.items()):
        where.append("EXISTS (SELECT 1 FROM run_labels l WHERE l.namespace = r.namespace AND l.uid = r.uid "
                     "AND l.name = ? AND l.value = ?)")
        params.extend([name, value])
    if query.continue_token is not None:
        started_us, seq = parse_continue_token(query.continue_token)
        where.append("(r.started_us, r.seq) < (?, ?)")
        params.extend([started_us, seq])
    columns = ", ".join(f"e.{column.strip()}" for column in entry_columns.split(","))
    sql = (f"SELECT {RUN_COLUMNS}, {columns} FROM runs r JOIN entries e ON e.namespace = r.namespace "
           f"AND e.seq = r.seq WHERE {' AND '.join(where)} ORDER BY r.started_us DESC, r.seq DESC LIMIT ?")
    params.append(query.limit + 1)
    return sql, params


def archived_run(columns: Row, entry: Entry) -> ArchivedRun:
    uid, name, workflow, phase, requester, started_us, finished_us = columns
    return ArchivedRun(entry=entry, uid=str(uid), name=str(name), workflow=str(workflow), phase=str(phase),
                       requester=str(requester), started_at=from_micros(int(str(started_us))),
                       finished_at=from_micros(int(str(finished_us))) if finished_us is not None else None)


def continue_token(last: ArchivedRun) -> str:
    """An opaque token for the page after `last` (what a reader passes back; it only orders, it grants nothing)."""
    raw = json.dumps({"v": TOKEN_VERSION, "s": micros(last.started_at), "q": last.entry.seq}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def parse_continue_token(token: str) -> tuple[int, int]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        started_us, seq = raw["s"], raw["q"]
        valid = raw.get("v") == TOKEN_VERSION and all(
            isinstance(value, int) and not isinstance(value, bool) for value in (started_us, seq))
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        valid = False
    if not valid:
        raise ArchiveError("continue: the token is not one this archive gave; ask again without it")
    return int(started_us), int(seq)

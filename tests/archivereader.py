"""An archive held in memory, for the archive API's tests: it answers `towline.archive.apiserver.ArchiveReader` as
the store does (newest first, filters, paging), with runs and logs a test writes into it.

Loadable from JSON (`MemoryArchive.from_json`), so the integration test's API server process serves the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from towline.archive.records import ArchivedRun, ArchiveError, Entry, HistoryPage, HistoryQuery
from towline.jsontypes import JSON

T0 = datetime(2025, 7, 1, 8, 0, tzinfo=UTC)


def entry(namespace: str, seq: int, kind: str, key: str, body: JSON) -> Entry:
    return Entry(namespace=namespace, seq=seq, kind=kind, key=key, recorded_at="2025-07-01T08:00:00.000000Z",
                 body=body, prev_digest=f"{seq - 1:064x}", digest=f"{seq:064x}")


def archived_run(namespace: str, name: str, *, seq: int, workflow: str = "deploy", phase: str = "Succeeded",
                 requester: str = "carol", approvers: tuple[str, ...] = (), labels: JSON | None = None,
                 started: datetime = T0, minutes: int = 3) -> ArchivedRun:
    uid = f"uid-{namespace}-{name}"
    body: JSON = {
        "run": {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}},
                "spec": {"workflowRef": {"name": workflow}, "requestedBy": requester}, "status": {"phase": phase}},
        "approvals": [{"spec": {"decidedBy": a, "decision": "Approved"}} for a in approvers],
        "logs": [], "deletedBeforeItEnded": False,
    }
    return ArchivedRun(entry=entry(namespace, seq, "run", uid, body), uid=uid, name=name, workflow=workflow,
                       phase=phase, requester=requester, started_at=started,
                       finished_at=started + timedelta(minutes=minutes))


def log_entry(namespace: str, run: ArchivedRun, step: str, text: str, *, seq: int, attempt: int = 1,
              truncated: bool = False) -> Entry:
    body: JSON = {"pod": f"{run.name}-{step}-{attempt}", "container": "step", "step": step, "attempt": attempt,
                  "run": run.name, "text": text, "bytes": len(text.encode()) * (2 if truncated else 1),
                  "truncated": truncated}
    return entry(namespace, seq, "log", f"{run.uid}/{step}/{attempt}", body)


@dataclass
class MemoryArchive:
    runs: list[ArchivedRun] = field(default_factory=list)
    log_entries: dict[str, list[Entry]] = field(default_factory=dict)
    """By run UID."""

    def add(self, run: ArchivedRun, *logs: Entry) -> ArchivedRun:
        self.runs.append(run)
        self.log_entries.setdefault(run.uid, []).extend(logs)
        return run

    def namespaces(self) -> list[str]:
        return sorted({run.entry.namespace for run in self.runs})

    def history(self, query: HistoryQuery) -> HistoryPage:
        def matches(run: ArchivedRun) -> bool:
            body: Any = run.entry.body
            labels, approvers = body["run"]["metadata"]["labels"], {a["spec"]["decidedBy"] for a in body["approvals"]}
            return (run.entry.namespace == query.namespace
                    and query.workflow in (None, run.workflow) and query.requester in (None, run.requester)
                    and query.phase in (None, run.phase) and (query.approver is None or query.approver in approvers)
                    and (query.started_from is None or run.started_at >= query.started_from)
                    and (query.started_before is None or run.started_at < query.started_before)
                    and all(labels.get(k) == v for k, v in query.labels.items()))

        found = sorted(filter(matches, self.runs), key=lambda run: run.started_at, reverse=True)
        token = query.continue_token or "0"
        if not token.isdigit():
            raise ArchiveError(f"continue {token!r} is not a token this archive gave; list again without it")
        start = int(token)
        end = start + query.limit
        return HistoryPage(runs=found[start:end], continue_token=str(end) if end < len(found) else None)

    def run(self, namespace: str, name_or_uid: str) -> ArchivedRun | None:
        mine = [run for run in self.runs if run.entry.namespace == namespace and name_or_uid in (run.uid, run.name)]
        return max(mine, key=lambda run: run.started_at, default=None)

    def logs(self, namespace: str, run: str, step: str | None = None) -> list[Entry]:
        found = self.run(namespace, run)
        if found is None:
            return []
        return [e for e in self.log_entries.get(found.uid, []) if step in (None, e.body["step"])]

    def to_json(self) -> str:
        return json.dumps({"runs": [_run_json(run) for run in self.runs],
                           "logs": {uid: [e.to_json() for e in entries] for uid, entries in self.log_entries.items()}})

    @classmethod
    def from_json(cls, text: str) -> MemoryArchive:
        document = json.loads(text)
        archive = cls()
        for value in document["runs"]:
            archive.runs.append(ArchivedRun(
                entry=Entry.from_json(value["entry"], "run"), uid=value["uid"], name=value["name"],
                workflow=value["workflow"], phase=value["phase"], requester=value["requester"],
                started_at=datetime.fromisoformat(value["startedAt"]),
                finished_at=datetime.fromisoformat(value["finishedAt"]) if value["finishedAt"] else None))
        archive.log_entries = {uid: [Entry.from_json(e, "log") for e in entries]
                               for uid, entries in document["logs"].items()}
        return archive


def _run_json(run: ArchivedRun) -> JSON:
    return {"entry": run.entry.to_json(), "uid": run.uid, "name": run.name, "workflow": run.workflow,
            "phase": run.phase, "requester": run.requester, "startedAt": run.started_at.isoformat(),
            "finishedAt": run.finished_at.isoformat() if run.finished_at else None}

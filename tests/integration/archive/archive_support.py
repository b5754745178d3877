"""Records as the archive component writes them, and raw SQL as a database administrator would run it."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.archive import ApprovalIndex, ArchiveStore, Entry, LogIndex, RunIndex

T0 = datetime(2025, 7, 1, 8, 0, tzinfo=UTC)
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
NAMESPACE = "team-a"


def archive_run(
    store: ArchiveStore, number: int, *, workflow: str = "deploy-prod", requester: str = "carol",
    phase: str = "Succeeded", started: datetime | None = None, labels: dict[str, str] | None = None,
    approvers: tuple[str, ...] = (), namespace: str = NAMESPACE,
) -> Entry:
    started = started or T0 + timedelta(minutes=number)
    document = {"metadata": {"name": f"{workflow}-{number}", "uid": f"uid-{number}", "labels": labels or {}},
                "spec": {"workflowRef": {"name": workflow}, "requestedBy": requester},
                "status": {"phase": phase, "steps": [{"id": "deploy", "attempts": [{"imageID": "sha256:ab"}]}]}}
    index = RunIndex(name=f"{workflow}-{number}", workflow=workflow, phase=phase, requester=requester,
                     started_at=started, finished_at=started + timedelta(seconds=30), labels=labels or {},
                     approvers=approvers)
    return store.append(namespace, "run", f"uid-{number}", document, index=index,
                        recorded_at=started + timedelta(seconds=31)).entry


def archive_approval(store: ArchiveStore, number: int, decided_by: str, *, namespace: str = NAMESPACE) -> Entry:
    body = {"metadata": {"name": f"deploy-prod-{number}-review"}, "spec": {"decision": "Approved",
                                                                           "decidedBy": decided_by, "reason": "ok"}}
    index = ApprovalIndex(run_uid=f"uid-{number}", run_name=f"deploy-prod-{number}", step="review",
                          decided_by=decided_by, decision="Approved")
    return store.append(namespace, "approval", f"approval-{number}", body, index=index,
                        recorded_at=T0 + timedelta(minutes=number, seconds=10)).entry


def archive_log(store: ArchiveStore, number: int, step: str, text: str, *, attempt: int = 1) -> Entry:
    body = {"text": text, "bytes": len(text.encode()), "truncated": False}
    index = LogIndex(run_uid=f"uid-{number}", run_name=f"deploy-prod-{number}", step=step, attempt=attempt,
                     pod_uid=f"pod-{number}-{step}-{attempt}", container="step")
    return store.append(NAMESPACE, "log", f"pod-{number}-{step}-{attempt}/step", body, index=index,
                        recorded_at=T0 + timedelta(minutes=number, seconds=20)).entry


def run_sql(url: str, *statements: str) -> None:
    """Run statements straight against the database, bypassing the store, in one transaction."""
    if url.startswith("sqlite:///"):
        connection = sqlite3.connect(url[len("sqlite:///"):])
        with connection:
            for statement in statements:
                connection.execute(statement)
        connection.close()
        return
    with psycopg.connect(url) as connection:
        for statement in statements:
            connection.execute(statement)  # type: ignore[arg-type]

"""What the real-node archive tests share: the worker's operator restarted with the archive on, `towline archive`
beside it as the chart's archive ServiceAccount over a SQLite database, a namespace whose runs it holds, and reading
the record through the store as the archive's readers do (test_archive_record.py, test_archive_job_ttl.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException
from tests.integration.replicas import in_place_of
from tests.integration.support import bind_role, wait_for
from tests.workers import namespace_prefix

from towline.archive.records import HistoryQuery
from towline.archive.store import ArchiveStore, open_store
from towline_dev.archiveprocess import ARCHIVE_SERVICE_ACCOUNT, ArchiveProcess, write_signing_key
from towline_dev.clients import KubeClients
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, operator_kubeconfig


@dataclass
class Archiving:
    cluster: ControlPlane
    operator: OperatorProcess
    archive: ArchiveProcess
    database_url: str
    key_file: Path

    def store(self) -> ArchiveStore:
        return open_store(self.database_url, now=datetime.now(UTC))


@contextmanager
def archiving_beside(
    towline_operator: OperatorProcess, cluster: ControlPlane, work: Path, *,
    operator_settings: Mapping[str, str] = {}, archive_settings: Mapping[str, str] = {}, started: bool = True,
) -> Iterator[Archiving]:
    """The worker's operator stopped and replaced by one with the archive on (TOWLINE_ARCHIVE, as the chart sets it)
    and `operator_settings`; the archive process with `archive_settings`, started or not; the worker's operator
    back afterwards. A failure carries the archive's log."""
    kubeconfig = operator_kubeconfig(cluster, work / "kubeconfig", service_account=ARCHIVE_SERVICE_ACCOUNT)
    database_url = f"sqlite:///{work / 'archive.db'}"
    key_file = write_signing_key(work / "signing-key.pem")
    archive = ArchiveProcess(kubeconfig=kubeconfig, log_path=work / "archive.log", database_url=database_url,
                             signing_key_file=key_file, watch_namespaces=towline_operator.watch_namespaces,
                             settings=dict(archive_settings))
    with in_place_of(towline_operator, work, settings={"TOWLINE_ARCHIVE": "true", **operator_settings}) as operator:
        if started:
            archive.start()
        try:
            yield Archiving(cluster, operator, archive, database_url, key_file)
        except BaseException as error:
            error.add_note(f"archive log: {archive.log_text()[-3000:]}")
            raise
        finally:
            archive.stop()


def namespace_archived_by(archiving: Archiving, admin_client: KubeClients) -> Iterator[str]:
    """A namespace of the worker's operator (carol runs, bob approves); deleted after the test while the archive
    still runs (its runs hold the archive's finalizer), and waited for."""
    name = f"{namespace_prefix()}archive-{secrets.token_hex(3)}"
    admin_client.core.create_namespace({"metadata": {"name": name, "labels": {"towline.dev/test": "true"}}})
    bind_role(archiving.cluster, name, "towline-runner", users=("carol",))
    bind_role(archiving.cluster, name, "towline-approver", users=("bob",))
    yield name
    admin_client.core.delete_namespace(name)

    def gone() -> bool:
        try:
            admin_client.core.read_namespace(name)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(f"namespace {name} to go (the archive releases its runs)", gone, timeout=180)


def quick_workflow(namespace: str) -> dict[str, Any]:
    """One step; the history keeps one succeeded and one failed run."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {"policy": {"history": {"succeeded": 1, "failed": 1}},
                 "steps": [{"id": "tally", "action": "data.transform",
                            "with": {"data": {"n": 1}, "fields": {"counted": "true"}}}]},
    }


def logs_of(archiving: Archiving, namespace: str, run: str) -> int:
    """How many log records of `run` the archive holds."""
    store = archiving.store()
    try:
        return len(store.logs(namespace, run))
    finally:
        store.close()


def archived_uids(store: ArchiveStore, namespace: str, workflow: str) -> list[str]:
    return [run.uid for run in store.history(HistoryQuery(namespace=namespace, workflow=workflow, limit=500)).runs]


def archived_in(archiving: Archiving, namespace: str, workflow: str) -> list[str]:
    store = archiving.store()
    try:
        return archived_uids(store, namespace, workflow)
    finally:
        store.close()

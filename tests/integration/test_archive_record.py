"""The record that lasts, on the real node: runs pruned by the history limit, their Jobs gone by their TTL, the
operator and the archive restarted, and the archive stopped while runs went on; the record still holds every run
with who approved it and its steps' logs, each once, and its chain verifies.

The worker's operator is restarted for this module with the archive on (TOWLINE_ARCHIVE, as the chart sets it) and a
short Job TTL; `towline archive` runs beside it as the chart's archive ServiceAccount, over a SQLite database, and the
tests read the record through the store as the archive's readers do.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from tests.integration.support import apply, bind_role, get, list_objects, start_run, wait_for, wait_for_phase
from tests.integration.test_operator_runs import awaiting_approval, decide
from tests.workers import namespace_prefix

from towline.archive.chain import load_private_key
from towline.archive.records import HistoryQuery
from towline.archive.store import ArchiveStore, open_store
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline_dev.archiveprocess import ARCHIVE_SERVICE_ACCOUNT, ArchiveProcess, write_signing_key
from towline_dev.clients import KubeClients
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, operator_kubeconfig

pytestmark = pytest.mark.integration

RUNS = "workflowruns.towline.dev"
STOPPED_FOR_RUNS = 50
"""Runs that start and end while the archive is stopped."""


@dataclass
class Archiving:
    cluster: ControlPlane
    operator: OperatorProcess
    archive: ArchiveProcess
    database_url: str
    key_file: Path

    def store(self) -> ArchiveStore:
        return open_store(self.database_url, now=datetime.now(UTC))


@pytest.fixture(scope="module")
def archiving(towline_operator: OperatorProcess, towline_installed: ControlPlane,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archiving]:
    work = tmp_path_factory.mktemp("archive")
    towline_operator.stop()
    operator = replace(towline_operator, log_path=work / "operator.log", process=None,
                       settings={**towline_operator.settings, "TOWLINE_ARCHIVE": "true"}).start()
    kubeconfig = operator_kubeconfig(towline_installed, work / "kubeconfig",
                                     service_account=ARCHIVE_SERVICE_ACCOUNT)
    database_url = f"sqlite:///{work / 'archive.db'}"
    key_file = write_signing_key(work / "signing-key.pem")
    archive = ArchiveProcess(kubeconfig=kubeconfig, log_path=work / "archive.log", database_url=database_url,
                             signing_key_file=key_file, watch_namespaces=towline_operator.watch_namespaces).start()
    try:
        yield Archiving(towline_installed, operator, archive, database_url, key_file)
    except BaseException as error:
        error.add_note(f"archive log: {archive.log_text()[-3000:]}")
        raise
    finally:
        archive.stop()
        operator.stop()
        towline_operator.start()


@pytest.fixture
def archived_namespace(archiving: Archiving, admin_client: KubeClients) -> Iterator[str]:
    yield from namespace_archived_by(archiving, admin_client)


def namespace_archived_by(archiving: Archiving, admin_client: KubeClients) -> Iterator[str]:
    """A namespace of the worker's operator; deleted after the test while the archive still runs (its runs hold the
    archive's finalizer), and waited for."""
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


def gated_workflow(namespace: str) -> dict[str, Any]:
    """bob approves, then one step; the history keeps one succeeded run."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "deploy-prod", "namespace": namespace},
        "spec": {
            "policy": {"history": {"succeeded": 1, "failed": 1}},
            "steps": [
                {"id": "review", "approval": {"approvers": {"users": ["bob"]}, "expiresAfter": "10m"}},
                {"id": "apply", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {"release": "2026.12"}, "fields": {"applied": "true"}}},
            ],
        },
    }


def quick_workflow(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {"policy": {"history": {"succeeded": 1, "failed": 1}},
                 "steps": [{"id": "tally", "action": "data.transform",
                            "with": {"data": {"n": 1}, "fields": {"counted": "true"}}}]},
    }


def approved_run(cluster: ControlPlane, namespace: str, name: str) -> str:
    start_run(cluster, namespace, "deploy-prod", name)
    decided = decide(cluster, namespace, awaiting_approval(cluster, namespace, name), "bob", reason="change 4711")
    assert decided.returncode == 0, decided.stderr
    return str(wait_for_phase(cluster, namespace, name, {"Succeeded"})["metadata"]["uid"])


def logs_of(archiving: Archiving, namespace: str, run: str) -> int:
    store = archiving.store()
    try:
        return len(store.logs(namespace, run))
    finally:
        store.close()


def archived_in(archiving: Archiving, namespace: str, workflow: str) -> list[str]:
    store = archiving.store()
    try:
        return archived_uids(store, namespace, workflow)
    finally:
        store.close()


def archived_uids(store: ArchiveStore, namespace: str, workflow: str) -> list[str]:
    return [run.uid for run in store.history(HistoryQuery(namespace=namespace, workflow=workflow, limit=500)).runs]


def test_a_pruned_run_stays_in_the_record_with_its_decider_and_logs_through_ttl_and_restarts(
    archiving: Archiving, archived_namespace: str,
) -> None:
    cluster, ns = archiving.cluster, archived_namespace
    apply(cluster, gated_workflow(ns))
    first = approved_run(cluster, ns, "deploy-1")
    for number in (2, 3, 4):
        approved_run(cluster, ns, f"deploy-{number}")
    wait_for("the history limit to prune deploy-1 (once archived)", lambda: get(cluster, RUNS, "deploy-1", ns) is None,
             timeout=120)
    # What the TTL-after-finished controller does to a finished Job after runner.jobTTLSecondsAfterFinished (a day by
    # default): a foreground delete, the pod first. deploy-4's are still there (deploy-1's went with the run).
    fourth = str((get(cluster, RUNS, "deploy-4", ns) or {}).get("metadata", {}).get("uid", ""))
    assert list_objects(cluster, "pods", ns, "towline.dev/run=deploy-4")
    wait_for("deploy-4's step log in the record (read when its pod ended)", lambda: logs_of(archiving, ns, fourth))
    for job in list_objects(cluster, "jobs", ns, "towline.dev/run=deploy-4"):
        cluster.kubectl("delete", "job", job["metadata"]["name"], "-n", ns, "--cascade=foreground")
    wait_for("deploy-4's pods to go with their Jobs", lambda: not list_objects(cluster, "pods", ns,
                                                                               "towline.dev/run=deploy-4"))

    def record_of_the_first_run(runs: int) -> None:
        with_restarts = archiving.store()
        try:
            archived = with_restarts.run(ns, first)
            assert archived is not None, "deploy-1 is in the record"
            assert archived.name == "deploy-1" and archived.phase == "Succeeded" and archived.requester == "carol"
            approvals = with_restarts.approvals(ns, first)
            assert [(a.body["approval"]["spec"]["decidedBy"], a.body["approval"]["spec"]["reason"])
                    for a in approvals] == [("bob", "change 4711")]
            assert archived.entry.body["approvals"][0]["spec"]["decidedBy"] == "bob"
            logs = with_restarts.logs(ns, first)
            assert {entry.body["step"] for entry in logs} == {"apply"}, "the step's pod's containers' logs"
            assert {ref["digest"] for ref in archived.entry.body["logs"]} == {entry.digest for entry in logs}
            listed = with_restarts.history(HistoryQuery(namespace=ns, workflow="deploy-prod", approver="bob"))
            assert first in [run.uid for run in listed.runs]
            assert len(archived_uids(with_restarts, ns, "deploy-prod")) == runs, "every run once"
            assert {entry.body["step"] for entry in with_restarts.logs(ns, fourth)} == {"apply"}, "past the TTL"
            public = load_private_key(archiving.key_file.read_bytes()).public_key()
            assert with_restarts.verify(ns, public).ok
        finally:
            with_restarts.close()

    record_of_the_first_run(4)
    archiving.operator.stop()
    archiving.archive.stop()
    archiving.operator.start()
    archiving.archive.start()
    approved_run(cluster, ns, "deploy-5")
    wait_for("deploy-5 in the record", lambda: len(archived_in(archiving, ns, "deploy-prod")) == 5,
             timeout=120)
    record_of_the_first_run(5)


def test_runs_that_end_while_the_archive_is_stopped_are_kept_until_archived_each_once(
    archiving: Archiving, archived_namespace: str,
) -> None:
    cluster, ns = archiving.cluster, archived_namespace
    apply(cluster, quick_workflow(ns))
    archiving.archive.stop()
    names = [start_run(cluster, ns, "nightly", f"nightly-{number}") for number in range(STOPPED_FOR_RUNS)]
    for name in names:
        wait_for_phase(cluster, ns, name, {"Succeeded"}, timeout=300)
    kept = list_objects(cluster, RUNS, ns)
    assert sorted(run["metadata"]["name"] for run in kept) == sorted(names), "none pruned while not archived"
    assert all(RUN_ARCHIVE_FINALIZER in run["metadata"]["finalizers"] for run in kept)
    uids = {run["metadata"]["uid"] for run in kept}
    archiving.archive.start()
    wait_for("every run archived", lambda: set(archived_in(archiving, ns, "nightly")) == uids, timeout=300)
    wait_for("the history limit to prune all but one", lambda: len(list_objects(cluster, RUNS, ns)) == 1, timeout=180)
    store = archiving.store()
    try:
        listed = archived_uids(store, ns, "nightly")
        assert len(listed) == STOPPED_FOR_RUNS == len(set(listed)), "each run once"
        assert all(store.logs(ns, uid) for uid in uids), "each with its step's logs"
        public = load_private_key(archiving.key_file.read_bytes()).public_key()
        assert store.verify(ns, public).ok
    finally:
        store.close()

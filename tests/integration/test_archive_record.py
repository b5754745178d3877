"""The record that lasts, on the real node: runs pruned by the history limit, their Jobs gone by their TTL, the
operator and the archive restarted, and the archive stopped while runs went on; the record still holds every run
with who approved it and its steps' logs, each once, and its chain verifies.

The worker's operator is restarted for this module with the archive on (TOWLINE_ARCHIVE, as the chart sets it) and a
short Job TTL; `towline archive` runs beside it as the chart's archive ServiceAccount, over a SQLite database, and the
tests read the record through the store as the archive's readers do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.archiving import (
    Archiving,
    archived_in,
    archived_uids,
    archiving_beside,
    logs_of,
    namespace_archived_by,
    quick_workflow,
)
from tests.integration.support import (
    apply,
    awaiting_approval,
    decide,
    get,
    list_objects,
    start_run,
    wait_for,
    wait_for_phase,
)

from towline.archive.chain import load_private_key
from towline.archive.records import HistoryQuery
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline_dev.clients import KubeClients
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = pytest.mark.integration

RUNS = "workflowruns.towline.dev"
STOPPED_FOR_RUNS = 50
"""Runs that start and end while the archive is stopped."""


@pytest.fixture(scope="module")
def archiving(towline_operator: OperatorProcess, towline_installed: ControlPlane,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archiving]:
    with archiving_beside(towline_operator, towline_installed, tmp_path_factory.mktemp("archive")) as archiving:
        yield archiving


@pytest.fixture
def archived_namespace(archiving: Archiving, admin_client: KubeClients) -> Iterator[str]:
    yield from namespace_archived_by(archiving, admin_client)


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




def approved_run(cluster: ControlPlane, namespace: str, name: str) -> str:
    start_run(cluster, namespace, "deploy-prod", name)
    decided = decide(cluster, namespace, awaiting_approval(cluster, namespace, name), "bob", reason="change 4711")
    assert decided.returncode == 0, decided.stderr
    return str(wait_for_phase(cluster, namespace, name, {"Succeeded"})["metadata"]["uid"])








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

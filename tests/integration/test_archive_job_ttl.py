"""While the archive is on, a step's Job outlives its TTL until its logs are in the record, and new runs wait when the
archive falls that far behind, on the real node.

The worker's operator is restarted for this module with the archive on (TOWLINE_ARCHIVE) and a backlog limit of 2
(TOWLINE_ARCHIVE_MAX_RUNS_AWAITING, the chart's archive.maxRunsAwaiting); `towline archive` runs as the chart's archive
ServiceAccount with a Job TTL of 1 s (TOWLINE_JOB_TTL_SECONDS, the chart's runner.jobTTLSecondsAfterFinished), so
kube-controller-manager's TTL controller deletes a Job the moment the archive gives it its TTL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.archiving import Archiving, archiving_beside, logs_of, namespace_archived_by, quick_workflow
from tests.integration.support import apply, get, list_objects, start_run, wait_for, wait_for_phase

from towline_dev.clients import KubeClients
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = pytest.mark.integration

RUNS = "workflowruns.towline.dev"
LIMIT = 2


@pytest.fixture(scope="module")
def archiving(towline_operator: OperatorProcess, towline_installed: ControlPlane,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archiving]:
    """The operator with the archive on and a limit of 2; the archive (1 s Job TTL) stopped until a test starts it."""
    with archiving_beside(towline_operator, towline_installed, tmp_path_factory.mktemp("archive-ttl"),
                          operator_settings={"TOWLINE_ARCHIVE_MAX_RUNS_AWAITING": str(LIMIT)},
                          archive_settings={"TOWLINE_JOB_TTL_SECONDS": "1"}, started=False) as archiving:
        yield archiving


@pytest.fixture
def archived_namespace(archiving: Archiving, admin_client: KubeClients) -> Iterator[str]:
    """test_archive_record's namespace (carol runs, gone after the test once the archive released its runs)."""
    yield from namespace_archived_by(archiving, admin_client)


def queued(cluster: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    run = get(cluster, RUNS, name, ns) or {}
    return next((c for c in (run.get("status") or {}).get("conditions") or []
                 if c["type"] == "Queued" and c["status"] == "True"), None)


def test_a_finished_steps_job_waits_for_the_archive_then_goes_by_its_ttl(
    archiving: Archiving, archived_namespace: str,
) -> None:
    cluster, ns = archiving.cluster, archived_namespace
    apply(cluster, quick_workflow(ns))
    archiving.archive.stop()
    start_run(cluster, ns, "nightly", "nightly-1")
    uid = str(wait_for_phase(cluster, ns, "nightly-1", {"Succeeded"})["metadata"]["uid"])
    [job] = list_objects(cluster, "jobs", ns, "towline.dev/run=nightly-1")
    name = job["metadata"]["name"]
    assert "ttlSecondsAfterFinished" not in job["spec"], "no TTL before the logs are in the record"
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"]), (
        "finished: a TTL, had it one, would already run")
    logs = cluster.kubectl("logs", f"job/{name}", "-n", ns, "--all-containers", check=False)
    assert logs.returncode == 0 and logs.stdout, logs.stderr
    archiving.archive.start()
    wait_for("the step's log in the record", lambda: logs_of(archiving, ns, uid), timeout=120)
    wait_for("the TTL controller to delete the Job the archive gave a TTL",
             lambda: get(cluster, "jobs", name, ns) is None, timeout=120)
    assert get(cluster, RUNS, "nightly-1", ns) is not None, "the run is kept (history limit 1): its Job went by TTL"


def test_new_runs_wait_while_the_archive_is_that_far_behind_and_start_when_it_catches_up(
    archiving: Archiving, archived_namespace: str,
) -> None:
    cluster, ns = archiving.cluster, archived_namespace
    apply(cluster, quick_workflow(ns))
    archiving.archive.stop()
    for number in range(LIMIT):
        start_run(cluster, ns, "nightly", f"nightly-{number}")
    for number in range(LIMIT):
        wait_for_phase(cluster, ns, f"nightly-{number}", {"Succeeded"})
    start_run(cluster, ns, "nightly", "nightly-held")
    condition = wait_for("the third run held for the archive", lambda: queued(cluster, ns, "nightly-held"))
    assert condition["reason"] == "ArchiveBehind", condition
    assert f"{LIMIT} ended run(s) of namespace {ns} await the archive" in condition["message"]
    assert f"archive.maxRunsAwaiting is {LIMIT}" in condition["message"]
    held = get(cluster, RUNS, "nightly-held", ns) or {}
    assert held["status"]["phase"] == "Pending"
    assert not list_objects(cluster, "jobs", ns, "towline.dev/run=nightly-held")
    archiving.archive.start()
    wait_for_phase(cluster, ns, "nightly-held", {"Succeeded"}, timeout=120)

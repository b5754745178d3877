"""Attacks on the record's hold on a run: the archive's finalizer (towline.dev/archive).

- A runner (or the requester) who wants a run gone from the record before it is written cannot remove the finalizer,
  and deleting the run leaves it in place until the archive has written it.
- The archive's own identity, if taken over, can release a run early, but cannot change what a run does, its
  labels or annotations, or any other finalizer: towline-archive-releases and towline-run-updates hold it to
  removing exactly its own finalizer.
- The archive sets a step Job's TTL once the Job's logs are in the record. Taken over, its identity can do that and
  only that: set ttlSecondsAfterFinished on a Towline step Job where it was unset. It cannot suspend a step, scale it,
  relabel it, change a TTL once set, touch a Job that is not Towline's, create a Job or delete one
  (towline-step-objects, and RBAC).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.attacks.attack_support import (
    RUNS,
    create_as,
    echo_workflow,
    gate_approval,
    gated_workflow,
    install,
    patch_as,
    refused,
    run_manifest,
)
from tests.integration.support import bind_role, get, list_objects, wait_for_phase

from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline_dev.archiveprocess import ARCHIVE_SERVICE_ACCOUNT
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, operator_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

ONLY_ITS_FINALIZER = "The archive may only remove the finalizer towline.dev/archive from a run"
ONLY_A_STEP_JOBS_TTL = "The archive may only set ttlSecondsAfterFinished on a"
FINALIZERS = "Only the Towline operator may change a run's finalizers"

AsArchive = Callable[..., subprocess.CompletedProcess[str]]


def kubectl_as(cluster: ControlPlane, kubeconfig: Path) -> AsArchive:
    kubectl = str(cluster.binaries.path("kubectl"))

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                              input=stdin, timeout=60, check=False)

    return run


@pytest.fixture
def archive_kubeconfig(towline_installed: ControlPlane, tmp_path: Path) -> Path:
    """A token of the archive's ServiceAccount, and nothing else."""
    return operator_kubeconfig(towline_installed, tmp_path / "archive.kubeconfig",
                               service_account=ARCHIVE_SERVICE_ACCOUNT)


@pytest.fixture
def as_archive(towline_installed: ControlPlane, archive_kubeconfig: Path) -> AsArchive:
    """kubectl as the archive's ServiceAccount."""
    return kubectl_as(towline_installed, archive_kubeconfig)


def as_the_archive_does(kubeconfig: Path, method: str, path: str,
                        body: Any = None, content_type: str = "application/merge-patch+json",
                        ) -> subprocess.CompletedProcess[str]:
    """One request as the archive makes it (a PATCH with no GET before it: the archive may not get Jobs), its
    answer as kubectl's would be (the API server's message on stderr when refused)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    request = urllib.request.Request(
        cluster["server"] + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {user['token']}", "Content-Type": content_type})
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return subprocess.CompletedProcess([method, path], 0, answer.read().decode(), "")
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            message = str(json.loads(text).get("message", text))
        except ValueError:
            message = text
        return subprocess.CompletedProcess([method, path], 1, "", f"{error.code} {message}")


@pytest.fixture
def released(towline_installed: ControlPlane, tmp_path: Path) -> Iterator[Callable[[str, str], None]]:
    """After the test: the run's finalizers cleared as the operator (the one identity `towline-run-updates` lets
    change them all), so its namespace can go."""
    as_operator = kubectl_as(towline_installed, operator_kubeconfig(towline_installed, tmp_path / "op.kubeconfig"))
    held: list[tuple[str, str]] = []
    yield lambda ns, name: held.append((ns, name))
    for ns, name in held:
        as_operator("patch", "workflowrun", name, "-n", ns, "--type", "merge", "-p",
                    json.dumps({"metadata": {"finalizers": None}}))


def held_run(cluster: ControlPlane, ns: str, name: str = "alices-run") -> dict[str, Any]:
    """A run that holds the archive's finalizer beside another one (as the admin put it there at creation)."""
    install(cluster, gated_workflow(ns))
    manifest = run_manifest(ns, "gated", name, "alice")
    manifest["metadata"]["finalizers"] = [RUN_ARCHIVE_FINALIZER, "example.com/keep"]
    assert create_as(cluster, "alice", manifest).returncode == 0
    gate_approval(cluster, ns, name)
    run = get(cluster, RUNS, name, ns)
    assert run is not None and RUN_ARCHIVE_FINALIZER in run["metadata"]["finalizers"]
    return run


def patched(as_archive: AsArchive, ns: str, name: str, patch: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return as_archive("patch", "workflowrun", name, "-n", ns, "--type", "merge", "-p", json.dumps(patch))


def test_a_runner_cannot_take_a_run_out_of_the_records_hold(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
    released: Callable[[str, str], None],
) -> None:
    cluster, ns = towline_installed, team_namespace
    held_run(cluster, ns)
    released(ns, "alices-run")
    for user in ("alice", "carol"):  # the requester, and another runner
        refused(patch_as(cluster, user, "workflowrun", "alices-run", ns,
                         {"metadata": {"finalizers": ["example.com/keep"]}}), FINALIZERS)
    bind_role(cluster, ns, "edit", users=("carol",))  # a person who may delete runs
    deleted = cluster.kubectl("delete", "workflowrun", "alices-run", "-n", ns, "--wait=false", user="carol",
                              check=False)
    assert deleted.returncode == 0, deleted.stderr
    run = get(cluster, RUNS, "alices-run", ns)
    assert run is not None and run["metadata"].get("deletionTimestamp"), "deleted, yet kept until archived"
    assert RUN_ARCHIVE_FINALIZER in run["metadata"]["finalizers"]


def test_the_archives_identity_removes_its_own_finalizer_and_changes_nothing_else(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, as_archive: AsArchive,
    released: Callable[[str, str], None],
) -> None:
    cluster, ns = towline_installed, team_namespace
    before = held_run(cluster, ns)
    released(ns, "alices-run")
    for patch in ({"spec": {"cancel": True}}, {"metadata": {"labels": {"towline.dev/workflow": "other"}}},
                  {"metadata": {"annotations": {"towline.dev/resume": "x"}}},
                  {"metadata": {"finalizers": [RUN_ARCHIVE_FINALIZER]}},  # another's finalizer removed
                  {"metadata": {"finalizers": ["example.com/keep", "example.com/added"]}}):
        message = refused(patched(as_archive, ns, "alices-run", patch))
        # Either policy may answer first (the API server does not order them): both name the rule.
        assert ONLY_ITS_FINALIZER in message or "only the towline operator may change" in message.lower(), message
    status = as_archive("patch", "workflowrun", "alices-run", "-n", ns, "--subresource", "status", "--type", "merge",
                        "-p", json.dumps({"status": {"phase": "Succeeded"}}))
    assert status.returncode != 0 and "forbidden" in status.stderr.lower(), status.stderr
    same = get(cluster, RUNS, "alices-run", ns)
    assert same is not None
    assert same["metadata"]["finalizers"] == before["metadata"]["finalizers"]
    assert same["spec"] == before["spec"]
    released = patched(as_archive, ns, "alices-run", {"metadata": {"finalizers": ["example.com/keep"]}})
    assert released.returncode == 0, released.stderr
    after = get(cluster, RUNS, "alices-run", ns)
    assert after is not None and after["metadata"]["finalizers"] == ["example.com/keep"]


def test_the_archives_identity_reads_no_secret_and_deletes_nothing(
    towline_installed: ControlPlane, team_namespace: str, as_archive: AsArchive,
) -> None:
    ns = team_namespace
    for verb, what in (("get", "secrets"), ("delete", "workflowruns"), ("create", "jobs"), ("delete", "pods"),
                       ("update", "workflowruns/status"), ("create", "approvals")):
        answer = as_archive("auth", "can-i", verb, what, "-n", ns)
        assert answer.stdout.strip() == "no", f"the archive may {verb} {what}"
    for verb, what in (("get", "pods/log"), ("watch", "workflowruns"), ("patch", "workflowruns")):
        assert as_archive("auth", "can-i", verb, what, "-n", ns).stdout.strip() == "yes", f"{verb} {what}"


@pytest.fixture
def archiving_operator(towline_operator: OperatorProcess, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The worker's operator with the archive on, for this test: its step Jobs have no TTL."""
    towline_operator.stop()
    operator = replace(towline_operator, log_path=tmp_path / "operator.log", process=None,
                       settings={**towline_operator.settings, "TOWLINE_ARCHIVE": "true"}).start()
    try:
        yield operator
    finally:
        operator.stop()
        towline_operator.start()


def jobs_path(ns: str, name: str = "") -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


def patch_job(kubeconfig: Path, ns: str, name: str, patch: Any,
              content_type: str = "application/merge-patch+json") -> subprocess.CompletedProcess[str]:
    return as_the_archive_does(kubeconfig, "PATCH", jobs_path(ns, name), patch, content_type)


def test_the_archives_identity_only_sets_an_unset_ttl_on_a_step_job(
    archiving_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
    archive_kubeconfig: Path, released: Callable[[str, str], None],
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    assert create_as(cluster, "alice", run_manifest(ns, "echo", "alices-run", "alice")).returncode == 0
    released(ns, "alices-run")
    wait_for_phase(cluster, ns, "alices-run", {"Succeeded"})
    [job] = list_objects(cluster, "jobs", ns, "towline.dev/run=alices-run")
    name = job["metadata"]["name"]
    assert "ttlSecondsAfterFinished" not in job["spec"]
    for patch in ({"spec": {"suspend": True}}, {"spec": {"parallelism": 2}},
                  {"spec": {"activeDeadlineSeconds": 1}},
                  {"metadata": {"labels": {"example.com/moved": "yes"}}},
                  {"metadata": {"annotations": {"example.com/note": "x"}}},
                  {"spec": {"ttlSecondsAfterFinished": 60, "suspend": True}},  # the TTL as cover for a change
                  {"spec": {"ttlSecondsAfterFinished": 60}, "metadata": {"labels": {"towline.dev/run": "other"}}}):
        refused(patch_job(archive_kubeconfig, ns, name, patch), ONLY_A_STEP_JOBS_TTL)
    status = as_the_archive_does(archive_kubeconfig, "PATCH", jobs_path(ns, name) + "/status",
                                 {"status": {"failed": 1}})
    refused(status, "403", "forbidden")
    unchanged = get(cluster, "jobs", name, ns)
    assert unchanged is not None and unchanged["spec"] == job["spec"]
    assert unchanged["metadata"].get("labels") == job["metadata"].get("labels")
    set_once = patch_job(archive_kubeconfig, ns, name, {"spec": {"ttlSecondsAfterFinished": 3600}})
    assert set_once.returncode == 0, set_once.stderr
    again = patch_job(archive_kubeconfig, ns, name, {"spec": {"ttlSecondsAfterFinished": 3600}})
    assert again.returncode == 0, f"the same value again changes nothing: {again.stderr}"
    for ttl in (0, 7200):
        refused(patch_job(archive_kubeconfig, ns, name, {"spec": {"ttlSecondsAfterFinished": ttl}}),
                ONLY_A_STEP_JOBS_TTL)
    removed = patch_job(archive_kubeconfig, ns, name, [{"op": "remove", "path": "/spec/ttlSecondsAfterFinished"}],
                        "application/json-patch+json")
    refused(removed, ONLY_A_STEP_JOBS_TTL)
    kept = get(cluster, "jobs", name, ns)
    assert kept is not None and kept["spec"]["ttlSecondsAfterFinished"] == 3600
    assert {**kept["spec"], "ttlSecondsAfterFinished": None} == {**job["spec"], "ttlSecondsAfterFinished": None}
    refused(as_the_archive_does(archive_kubeconfig, "DELETE", jobs_path(ns, name)), "403", "forbidden")
    assert get(cluster, "jobs", name, ns) is not None


def test_the_archives_identity_cannot_touch_a_job_that_is_not_towlines_nor_create_one(
    towline_installed: ControlPlane, team_namespace: str, archive_kubeconfig: Path,
) -> None:
    cluster, ns = towline_installed, team_namespace
    theirs = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly-backup", "namespace": ns},
              "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
                  {"name": "backup", "image": "registry.example.com/backup:1"}]}}}}
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(theirs))
    refused(patch_job(archive_kubeconfig, ns, "nightly-backup", {"spec": {"ttlSecondsAfterFinished": 1}}),
            ONLY_A_STEP_JOBS_TTL)
    job = get(cluster, "jobs", "nightly-backup", ns)
    assert job is not None and "ttlSecondsAfterFinished" not in job["spec"]
    made = as_the_archive_does(archive_kubeconfig, "POST", jobs_path(ns),
                               {**theirs, "metadata": {"name": "mine", "namespace": ns}}, "application/json")
    refused(made, "403", "forbidden")
    refused(as_the_archive_does(archive_kubeconfig, "DELETE", jobs_path(ns, "nightly-backup")), "403", "forbidden")
    assert get(cluster, "jobs", "nightly-backup", ns) is not None

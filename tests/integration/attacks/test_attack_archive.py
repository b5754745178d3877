"""Attacks on the record's hold on a run: the archive's finalizer (towline.dev/archive).

- A runner (or the requester) who wants a run gone from the record before it is written cannot remove the finalizer,
  and deleting the run leaves it in place until the archive has written it.
- The archive's own identity, if taken over, can release a run early, but cannot change what a run does, its
  labels or annotations, or any other finalizer: towline-archive-releases and towline-run-updates hold it to
  removing exactly its own finalizer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.attacks.attack_support import (
    RUNS,
    create_as,
    gate_approval,
    gated_workflow,
    install,
    patch_as,
    refused,
    run_manifest,
)
from tests.integration.support import bind_role, get

from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline_dev.archiveprocess import ARCHIVE_SERVICE_ACCOUNT
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess, operator_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

ONLY_ITS_FINALIZER = "The archive may only remove the finalizer towline.dev/archive from a run"
FINALIZERS = "Only the Towline operator may change a run's finalizers"

AsArchive = Callable[..., subprocess.CompletedProcess[str]]


def kubectl_as(cluster: ControlPlane, kubeconfig: Path) -> AsArchive:
    kubectl = str(cluster.binaries.path("kubectl"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                              timeout=60, check=False)

    return run


@pytest.fixture
def as_archive(towline_installed: ControlPlane, tmp_path: Path) -> AsArchive:
    """kubectl with a token of the archive's ServiceAccount, and nothing else."""
    return kubectl_as(towline_installed, operator_kubeconfig(towline_installed, tmp_path / "archive.kubeconfig",
                                                             service_account=ARCHIVE_SERVICE_ACCOUNT))


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
        assert ONLY_ITS_FINALIZER in message or "only the Towline operator may change" in message, message
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

"""`kubectl towline logs` shows a pod only when its controlling Job is one the run's status names: the run
label alone is what anybody's Job can put on its pods' template."""

from __future__ import annotations

from typing import Any

from towline.engine import job_name
from towline.plugin.commands import runs_own_pods

RUN = "release-1"


def pod(name: str, job: str, *, kind: str = "Job", controller: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"towline.dev/run": RUN}, "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": kind, "name": job, "uid": "u", "controller": controller}]}}


def run_status(*job_names: str, history: tuple[str, ...] = ()) -> dict[str, Any]:
    steps = [{"id": "deploy", "jobName": name, "history": [{"attempt": i + 1, "jobName": old}
                                                           for i, old in enumerate(history)]}
             for name in job_names]
    return {"metadata": {"name": RUN}, "status": {"steps": steps}}


def test_only_pods_of_the_jobs_the_run_status_names_are_shown() -> None:
    first, second = job_name(RUN, "deploy", 1), job_name(RUN, "deploy", 2)
    run = run_status(second, history=(first,))
    ours = [pod("a", first), pod("b", second)]
    strangers = [pod("c", "carols-job"), pod("d", second, controller=False), pod("e", second, kind="ReplicaSet")]
    assert runs_own_pods(run, ours + strangers) == ours


def test_a_run_without_status_shows_no_pod() -> None:
    assert runs_own_pods({"metadata": {"name": RUN}}, [pod("a", job_name(RUN, "deploy", 1))]) == []

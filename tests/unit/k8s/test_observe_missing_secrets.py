"""A step whose Secret is missing: the pod starts (optional volumes), the runner fails the attempt naming
the Secret, and the operator maps that to the stuck-Job outcome (REASON_UNMOUNTABLE: credentials need
repair, the Job deleted once recorded). The document is the pod's own, so it is honoured only for the
Secrets that very pod mounts, and only as an `auth` failure."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from towline.engine import job_name
from towline.engine.observed import REASON_UNMOUNTABLE
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.observe import build_observed
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.runtime.cache import trim
from towline.validation.catalog import connector_catalog
from towline_connectors.redact import Redactor
from towline_connectors.runner import run_step

RUN = RunRef(name="deploy-1", namespace="team", uid="uid-of-deploy-1", workflow="wf")
JOB = job_name(RUN.name, "call", 1)


def rendered_job(credentials: dict[str, str]) -> dict[str, Any]:
    """The step reads key `token` of each credential (a pod mounts only what its step reads)."""
    reads = {alias: {"credential": alias, "key": "token"} for alias in credentials}
    job = build_step_job(
        RUN, BuiltinAction(connector_catalog()), job_name=JOB, step_id="call", attempt=1, action="http.request",
        inputs={"url": "https://example.com", "method": "POST", "json": reads}, credentials=credentials,
        idempotency_key="k",
        timeout_seconds=60, settings=StepPodSettings(),
    )
    job["metadata"]["uid"] = "job-uid"
    job["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    return job


def pod_of(job: dict[str, Any], message: str) -> dict[str, Any]:
    """The Job's pod as the API server returns it: the template's spec, the runner's termination message."""
    return {
        "metadata": {"name": f"{JOB}-x", "labels": job["spec"]["template"]["metadata"]["labels"],
                     "ownerReferences": [{"kind": "Job", "name": JOB, "uid": "job-uid", "controller": True}]},
        "spec": job["spec"]["template"]["spec"],
        "status": {"containerStatuses": [{"name": "step", "image": StepPodSettings().image,
                                          "state": {"terminated": {"exitCode": 1, "message": message}}}]},
    }


def runner_document(job: dict[str, Any], credentials_dir: Path, result_path: Path) -> str:
    """Run the real runner with the env the operator rendered, against `credentials_dir` as the mounts."""
    env = {item["name"]: item["value"] for item in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    env.update(TOWLINE_CREDENTIALS_DIR=str(credentials_dir), TOWLINE_RESULT_PATH=str(result_path))
    env.pop("TOWLINE_ISOLATION_PROBE", None)
    run_step(env, redactor=Redactor(), log=io.StringIO())
    return result_path.read_text()


def observe(job: dict[str, Any], pod: dict[str, Any], *, trimmed: bool = True) -> Any:
    jobs, pods = ([trim("Job", job)], [trim("Pod", pod)]) if trimmed else ([job], [pod])
    return build_observed(jobs, pods, [], run_name=RUN.name, run_uid=RUN.uid).jobs[("call", 1)]


@pytest.mark.parametrize("trimmed", [True, False], ids=["through-the-cache", "listed"])
def test_the_runners_missing_secret_failure_is_the_stuck_job_outcome(tmp_path: Path, trimmed: bool) -> None:
    job = rendered_job({"api": "api-token"})
    mounts = tmp_path / "credentials"
    (mounts / "api").mkdir(parents=True)  # what an optional Secret volume is when the Secret is missing
    message = runner_document(job, mounts, tmp_path / "termination-log")
    observed = observe(job, pod_of(job, message), trimmed=trimmed)
    assert (observed.state, observed.reason, observed.credentials_missing) == ("failed", REASON_UNMOUNTABLE, True)
    assert observed.result is not None and observed.result.error_class == "auth"
    assert observed.result.retryable is False
    assert observed.result.missing_secrets == ("api-token",)
    assert "kubectl create secret generic api-token --from-literal=token=VALUE -n team" in observed.result.message


def test_a_secret_without_the_key_the_step_reads_is_the_stuck_job_outcome_naming_the_key(tmp_path: Path) -> None:
    """Only the keys the step reads are mounted (optional volume items): a Secret lacking one shows up empty."""
    job = rendered_job({"api": "api-token", "crm": "crm-api"})
    mounts = tmp_path / "credentials"
    (mounts / "api").mkdir(parents=True)
    (mounts / "api" / "token").write_text("s3cret-never-shown")
    (mounts / "crm").mkdir()  # crm-api exists without `token`: the kubelet skips that item of the optional volume
    message = runner_document(job, mounts, tmp_path / "termination-log")
    observed = observe(job, pod_of(job, message))
    assert (observed.reason, observed.credentials_missing) == (REASON_UNMOUNTABLE, True)
    assert observed.result is not None and observed.result.missing_secrets == ("crm-api",)
    assert ("Secret 'crm-api' (credential 'crm') does not exist in this namespace or has none of the keys the "
            "step reads (token)") in observed.result.message
    assert "never-shown" not in message


def document(**fields: Any) -> str:
    return json.dumps({"ok": False, "errorClass": "auth", "message": "m", "retryable": False, **fields})


def test_a_document_naming_a_secret_the_pod_does_not_mount_is_an_ordinary_failure() -> None:
    # Whatever writes the termination message cannot make the operator treat another Secret as missing.
    job = rendered_job({"api": "api-token"})
    observed = observe(job, pod_of(job, document(missingSecrets=["api-token", "someone-elses"])))
    assert observed.reason != REASON_UNMOUNTABLE and not observed.credentials_missing
    assert observed.result.error_class == "auth"  # still its own step's auth failure, nothing more


@pytest.mark.parametrize("fields", [
    {"errorClass": "permanent", "missingSecrets": ["api-token"]},
    {"ok": True, "errorClass": None, "missingSecrets": ["api-token"]},
    {"missingSecrets": "api-token"},
    {"missingSecrets": [{"name": "api-token"}]},
    {"missingSecrets": []},
    {},
], ids=["not-auth", "ok", "not-a-list", "not-names", "empty", "absent"])
def test_only_an_auth_failure_listing_mounted_secrets_counts(fields: dict[str, Any]) -> None:
    job = rendered_job({"api": "api-token"})
    assert not observe(job, pod_of(job, document(**fields))).credentials_missing


def test_a_job_still_running_is_never_marked_however_its_pod_reads() -> None:
    job = rendered_job({"api": "api-token"})
    job["status"] = {"active": 1}
    observed = observe(job, pod_of(job, document(missingSecrets=["api-token"])))
    assert (observed.state, observed.credentials_missing) == ("active", False)


def test_the_cache_keeps_only_the_pods_secret_volume_names() -> None:
    job = rendered_job({"api": "api-token", "crm": "crm-api"})
    kept = trim("Pod", pod_of(job, document()))
    assert sorted(v["secret"]["secretName"] for v in kept["spec"]["volumes"]) == ["api-token", "crm-api"]
    assert set(kept["spec"]) == {"volumes", "containers"}
    assert kept["spec"]["containers"] == [{"name": "step", "image": StepPodSettings().image}]

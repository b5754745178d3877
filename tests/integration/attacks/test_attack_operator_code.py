"""A compromised operator, with the operator ServiceAccount's own token (it may create Jobs and pods and read pods'
termination messages, never a Secret), tries to run code of its own choosing next to a namespace's Secrets through
a step-shaped Job: the runner image as a user step type's `step` container with a command of its own, a code step
where the chart has code steps off, or an image beside stepTypes.allowedImagePrefixes (`localhost/towline-steps`,
which ends at a `/`, does not cover `localhost/towline-steps-evil/...`). Policy towline-step-objects refuses each;
when it did not, the live attacks below read the Secret back from the pod's termination message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.attacks.attack_support import AsOperator, create_as, refused, run_manifest
from tests.integration.support import get, wait_for

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.engine import job_name
from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, StepTypeImage, build_step_job
from towline.k8s.steppods import build_step_pod
from towline.validation.catalog import connector_catalog
from towline_dev.controlplane import ControlPlane
from towline_dev.images import RUNNER_IMAGE

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

CANARY = "crown-jewels-8c2f51-do-not-leak"
IMAGES = "a step Job runs only the images the chart allows"
CODE_OFF = "a step Job runs a code action (code.python, code.wasm) only where the chart has code steps on"
STEP_TYPE_IMAGE = "localhost/towline-steps/tcp-probe:dev"
STEAL = ("import shutil; shutil.copy('/var/run/towline/credentials/api/token', '/dev/termination-log')")
# The runner redacts a mounted Secret's value (and its usual encodings) from its result: the code hands it back
# reversed.
CODE_STEAL = ("def main(inputs):\n"
              "    return open('/var/run/towline/credentials/api/token').read()[::-1]\n")

@pytest.fixture
def victim_run(towline_installed: ControlPlane, namespace: str, as_operator: AsOperator) -> RunRef:
    """A real WorkflowRun of the namespace (so the garbage collector keeps the Jobs it owns) and the Secret
    `crown-jewels`, which the operator may not read."""
    cluster, ns = towline_installed, namespace
    cluster.kubectl("create", "secret", "generic", "crown-jewels", "-n", ns, f"--from-literal=token={CANARY}")
    assert as_operator("get", "secret", "crown-jewels", "-n", ns).returncode != 0, "RBAC: no Secret for the operator"
    assert create_as(cluster, "admin", run_manifest(ns, "wf", "victim-run", "admin")).returncode == 0
    uid = (get(cluster, "workflowruns.towline.dev", "victim-run", ns) or {})["metadata"]["uid"]
    return RunRef(name="victim-run", namespace=ns, uid=uid, workflow="wf")


def user_step_job(run: RunRef) -> dict[str, Any]:
    """A user step type's Job exactly as the operator builds one (runner `prepare`, then the type's container)."""
    step_type = ResolvedStepType(kind="StepType", name="probe", spec=StepTypeSpec(image=STEP_TYPE_IMAGE))
    return build_step_job(
        run, StepTypeImage(step_type), job_name=job_name(run.name, "probe", 1), step_id="probe", attempt=1,
        action="steptype/probe", inputs={}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=StepPodSettings(image=RUNNER_IMAGE),
    )


def code_step_job(run: RunRef) -> dict[str, Any]:
    """A code.python step's Job exactly as the operator builds one, the Secret `crown-jewels` bound as `api`."""
    return build_step_job(
        run, BuiltinAction(connector_catalog()),
        job_name=job_name(run.name, "steal", 1), step_id="steal", attempt=1, action="code.python",
        inputs={"source": CODE_STEAL, "inputs": {"token": {"credential": "api", "key": "token"}}},
        credentials={"api": "crown-jewels"}, idempotency_key="k",
        timeout_seconds=60, settings=StepPodSettings(image=RUNNER_IMAGE),
    )


def _step_container(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def runner_image_as_the_step(job: dict[str, Any]) -> dict[str, Any]:
    """The issue's shape: the `step` container is the runner image running a command of the operator's, with an
    optional Secret volume where a bound credential would be."""
    spec = job["spec"]["template"]["spec"]
    spec["volumes"].append({"name": "steal", "secret": {"secretName": "crown-jewels", "optional": True}})
    _step_container(job).update(image=RUNNER_IMAGE, command=["python3", "-c", STEAL])
    _step_container(job)["volumeMounts"].append(
        {"name": "steal", "mountPath": "/var/run/towline/credentials/api", "readOnly": True})
    return job


def read_back(cluster: ControlPlane, as_operator: AsOperator, job: dict[str, Any]) -> str:
    """What the operator reads once it has made the Job's pod: every container's termination message."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    stored = json.loads(as_operator("get", "job", name, "-n", ns, "-o", "json").stdout)
    pod = build_step_pod(stored)
    pod["metadata"].pop("finalizers")  # nobody would remove it: the namespace's deletion must not wait for it
    created = as_operator.create(pod)
    assert created.returncode == 0, f"the Job was admitted but not its pod: {created.stderr}"

    def ended() -> str | None:
        found = json.loads(as_operator("get", "pod", name, "-n", ns, "-o", "json").stdout)
        statuses = (found.get("status") or {}).get("containerStatuses") or []
        if statuses and all("terminated" in (s.get("state") or {}) for s in statuses):
            return " ".join(str(s["state"]["terminated"].get("message")) for s in statuses)
        return None

    return str(wait_for(f"pod {name} to end", ended, timeout=180))


def leaked(message: str) -> bool:
    return CANARY in message or CANARY[::-1] in message


def test_a_compromised_operator_cannot_run_the_runner_image_as_a_step_types_container(
    towline_installed: ControlPlane, victim_run: RunRef, as_operator: AsOperator,
) -> None:
    job = runner_image_as_the_step(user_step_job(victim_run))
    created = as_operator.create(job)
    if created.returncode == 0:
        assert not leaked(read_back(towline_installed, as_operator, job)), \
            "the operator read the Secret's value through the runner image run as a step type's container"
    refused(created, IMAGES)


def test_a_compromised_operator_cannot_run_code_where_the_chart_has_code_steps_off(
    towline_installed: ControlPlane, victim_run: RunRef, as_operator: AsOperator,
) -> None:
    """The tests' chart has code steps on only in the namespaces of tests named test_code_* (towline_dev.install):
    this namespace is not one, whatever the operator says."""
    job = code_step_job(victim_run)
    created = as_operator.create(job)
    if created.returncode == 0:
        assert not leaked(read_back(towline_installed, as_operator, job)), \
            "the operator ran code of its own next to the Secret where the chart has code steps off"
    refused(created, CODE_OFF)


USER_STEP_IMAGES = {
    "the-runner-image": RUNNER_IMAGE,
    "beside-the-allowed-prefix": "localhost/towline-steps-evil/steal:dev",
    "a-registry-named-like-the-prefix": "localhost/towline-steps.evil.example/steal:dev",
}


@pytest.mark.parametrize("image", list(USER_STEP_IMAGES))
def test_a_step_types_container_runs_only_images_under_the_allowed_prefixes(
    towline_installed: ControlPlane, victim_run: RunRef, as_operator: AsOperator, image: str,
) -> None:
    job = user_step_job(victim_run)
    _step_container(job)["image"] = USER_STEP_IMAGES[image]
    refused(as_operator.create(job, dry_run=True), IMAGES)


@pytest.mark.parametrize("action", ["code.python", "code.wasm"])
def test_the_runner_of_any_shape_runs_no_code_action_where_code_steps_are_off(
    towline_installed: ControlPlane, victim_run: RunRef, as_operator: AsOperator, action: str,
) -> None:
    """A user step type's `prepare` runs the runner too: no code action there either."""
    job = user_step_job(victim_run)
    job["spec"]["template"]["spec"]["initContainers"][0]["env"].append({"name": "TOWLINE_ACTION", "value": action})
    refused(as_operator.create(job, dry_run=True), CODE_OFF)
    plain = code_step_job(victim_run)
    for entry in _step_container(plain)["env"]:
        if entry["name"] == "TOWLINE_ACTION":
            entry["value"] = action
    refused(as_operator.create(plain, dry_run=True), CODE_OFF)


def test_code_step_jobs_as_the_operator_builds_them_are_admitted_where_code_steps_are_on(
    towline_installed: ControlPlane, victim_run: RunRef, as_operator: AsOperator,
) -> None:
    """The control: named test_code_*, this test's namespace is one the tests' chart has code steps on in."""
    created = as_operator.create(code_step_job(victim_run), dry_run=True)
    assert created.returncode == 0, created.stderr

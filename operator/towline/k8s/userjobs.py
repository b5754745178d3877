"""The Job of a user step type's attempt: the runner proves isolation first, then the user's container runs.

Two containers in one hardened pod (towline.k8s.objects: restricted, read-only
root, no token):

- `prepare`, an init container running the runner image (`--prepare`): it
  checks the bound Secrets are there, waits until the pod's egress isolation is
  in effect (the probe is refused), then writes the resolved inputs to the
  shared `step` volume. The kubelet starts the user's container only after it
  exits 0, so the user's image cannot skip the check: its code never runs in a
  pod whose NetworkPolicies are not yet enforced.
- `step`, the type's image with its command and args, reading the inputs from
  the `step` volume (read-only), the bound credential slots (exactly the keys
  the type declares) and the protocol's environment, and writing its result
  document to the termination message (docs/step-protocol.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from towline.api.steptype import ResolvedStepType
from towline.k8s.mounts import CREDENTIALS_DIR, credential_volumes
from towline.k8s.objects import (
    DEFAULT_LIMITS,
    DEFAULT_REQUESTS,
    JSON,
    RESULT_PATH,
    RunRef,
    StepPodSettings,
    container_security_context,
    step_job_manifest,
    step_labels,
)
from towline_connectors.wire import (
    CREDENTIAL_KEYS_ENV,
    CREDENTIAL_SECRETS_ENV,
    INPUT_ENV,
    ISOLATION_PROBE_ENV,
    NAMESPACE_ENV,
    PREPARE_FLAG,
)
from towline_step.protocol import (
    ALLOW_HOSTS_ENV,
    CREDENTIALS_DIR_ENV,
    DEADLINE_SECONDS_ENV,
    DEFAULT_INPUTS_PATH,
    IDEMPOTENCY_KEY_ENV,
    INPUTS_PATH_ENV,
    PROTOCOL_VERSION,
    PROTOCOL_VERSION_ENV,
    RESULT_PATH_ENV,
    STEP_TYPE_ENV,
)

INPUTS_PATH = DEFAULT_INPUTS_PATH
STEP_DIR = INPUTS_PATH.rsplit("/", 1)[0]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def bound_slot_keys(step_type: ResolvedStepType, credentials: Mapping[str, str]) -> dict[str, list[str]]:
    """slot -> the keys the type declares, for the slots the step binds: the only keys the pod mounts."""
    return {slot.name: sorted(set(slot.keys)) for slot in step_type.spec.credentials if slot.name in credentials}


def build_user_step_job(
    run: RunRef,
    *,
    job_name: str,
    step_id: str,
    attempt: int,
    action: str,
    step_type: ResolvedStepType,
    inputs: Mapping[str, Any],
    credentials: Mapping[str, str],
    idempotency_key: str,
    timeout_seconds: int | None,
    allow_hosts: Sequence[str] = (),
    settings: StepPodSettings,
) -> JSON:
    """One Job per attempt of a user type's step; `backoffLimit: 0` because the engine owns retries."""
    spec = step_type.spec
    deadline = timeout_seconds or spec.timeout_seconds or settings.default_timeout_seconds
    keys = bound_slot_keys(step_type, credentials)
    secret_volumes, secret_mounts = credential_volumes(credentials, keys)
    volumes: list[JSON] = [
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {"name": "step", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        *secret_volumes,
    ]
    tmp_mount = {"name": "tmp", "mountPath": "/tmp"}  # noqa: S108 - the pod's own scratch
    prepare_env = {
        INPUT_ENV: _compact(dict(inputs)),
        INPUTS_PATH_ENV: INPUTS_PATH,
        DEADLINE_SECONDS_ENV: str(max(1, deadline - 5)),
        CREDENTIALS_DIR_ENV: CREDENTIALS_DIR,
        RESULT_PATH_ENV: RESULT_PATH,
        CREDENTIAL_SECRETS_ENV: _compact({slot: credentials[slot] for slot in keys}),
        CREDENTIAL_KEYS_ENV: _compact(keys),
        NAMESPACE_ENV: run.namespace,
        **settings.extra_env,
    }
    if settings.isolation_probe:
        prepare_env[ISOLATION_PROBE_ENV] = settings.isolation_probe
    prepare = {
        "name": "prepare",
        "image": settings.image,
        "command": list(settings.command),
        "args": [PREPARE_FLAG],
        "env": _env(prepare_env),
        "volumeMounts": [tmp_mount, {"name": "step", "mountPath": STEP_DIR}, *secret_mounts],
        "terminationMessagePath": RESULT_PATH,
        "terminationMessagePolicy": "File",
        "resources": {"requests": dict(DEFAULT_REQUESTS), "limits": dict(DEFAULT_LIMITS)},
        "securityContext": container_security_context(),
    }
    user_env = {
        PROTOCOL_VERSION_ENV: str(PROTOCOL_VERSION),
        STEP_TYPE_ENV: action,
        INPUTS_PATH_ENV: INPUTS_PATH,
        CREDENTIALS_DIR_ENV: CREDENTIALS_DIR,
        RESULT_PATH_ENV: RESULT_PATH,
        IDEMPOTENCY_KEY_ENV: idempotency_key,
        DEADLINE_SECONDS_ENV: str(max(1, deadline - 5)),
        ALLOW_HOSTS_ENV: _compact(list(allow_hosts)),
    }
    user: JSON = {
        "name": "step",
        "image": spec.image,
        "env": _env(user_env),
        "volumeMounts": [tmp_mount, {"name": "step", "mountPath": STEP_DIR, "readOnly": True}, *secret_mounts],
        "terminationMessagePath": RESULT_PATH,
        "terminationMessagePolicy": "File",
        "resources": _resources(step_type),
        "securityContext": container_security_context(),
    }
    if spec.command is not None:
        user["command"] = list(spec.command)
    if spec.args is not None:
        user["args"] = list(spec.args)
    return step_job_manifest(
        run, job_name=job_name, step_id=step_id, labels=step_labels(run, step_id, attempt), deadline=deadline,
        settings=settings, containers=[user], volumes=volumes, init_containers=[prepare],
        image_pull_secrets=spec.image_pull_secrets,
    )


def _env(values: Mapping[str, str]) -> list[JSON]:
    return [{"name": name, "value": value} for name, value in values.items()]


def _resources(step_type: ResolvedStepType) -> JSON:
    declared = step_type.spec.resources
    requests = {**DEFAULT_REQUESTS, **declared.requests.model_dump(exclude_none=True)}
    limits = {**DEFAULT_LIMITS, **declared.limits.model_dump(exclude_none=True)}
    return {"requests": requests, "limits": limits}

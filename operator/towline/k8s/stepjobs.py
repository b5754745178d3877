"""The one builder of a step attempt's Job and pod, for every kind of step.

The kinds are data (as Tekton's `pod.Builder` and Argo's `workflowpod.go` take a step's
template): a built-in action or code step (`BuiltinAction`), a user step type's image
(`StepTypeImage`), an approval notification (`Notification`). Each says only what sets its pod
apart (`StepPod`: its containers, their own environment, its extra volumes, user and labels);
`build_step_job` makes the rest the same way for all: the deadline, the runner's environment,
the scratch and credential volumes, the container hardening and the Job around the pod
(towline.k8s.objects.step_job_manifest: Pod Security "restricted", no token, owned by the run).

Pure: no API calls. Credentials are Secret volumes holding exactly the keys the step reads
(towline.k8s.mounts); their values never enter a manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from towline.api.resources import PodMetadata, StepResources, quantity_value
from towline.api.steptype import ResolvedStepType
from towline.engine.traces import attempt_traceparent
from towline.jsontypes import JSON
from towline.k8s.labels import LABEL_EGRESS, LABEL_NOTIFICATION
from towline.k8s.mounts import credential_keys, credential_volumes, slot_keys
from towline.k8s.objects import RunRef, StepPodSettings, step_job_manifest, step_labels
from towline.validation.catalog import CONFIG_MAP_FILE_PATH, PodNeeds
from towline_connectors.wire import (
    ACTION_ENV,
    CREDENTIAL_KEYS_ENV,
    CREDENTIAL_SECRETS_ENV,
    DEADLINE_AT_ENV,
    INPUT_ENV,
    ISOLATION_PROBE_ENV,
    NAMESPACE_ENV,
    NETWORK_ENV,
    PREPARE_FLAG,
    rfc3339,
)
from towline_step.protocol import (
    CREDENTIALS_DIR_ENV,
    DEADLINE_SECONDS_ENV,
    DEFAULT_CREDENTIALS_DIR,
    DEFAULT_INPUTS_PATH,
    DEFAULT_RESULT_PATH,
    IDEMPOTENCY_KEY_ENV,
    INPUTS_PATH_ENV,
    RESULT_PATH_ENV,
    TRACEPARENT_ENV,
    step_environment,
)

RESULT_MARGIN_SECONDS = 5
"""A step is told its deadline this much before its pod's `activeDeadlineSeconds`: it stops its work in time to
still write its result document, which the kubelet would otherwise kill it in the middle of."""
STEP_DIR = DEFAULT_INPUTS_PATH.rsplit("/", 1)[0]
CODE_USER_IDS = (1_000_000, 2_000_000_000)
"""The range code steps' per-pod user ids come from: above every distribution's and the images' own users."""

SCRATCH_VOLUME: JSON = {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}
SCRATCH_MOUNT: JSON = {"name": "tmp", "mountPath": "/tmp"}  # noqa: S108 - the pod's own scratch
STEP_VOLUME: JSON = {"name": "step", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
"""Where a step type's `prepare` writes the inputs its image reads."""


class PodCatalog(Protocol):
    """What the builder asks of the built-in actions' metadata (towline.validation.catalog.ConnectorCatalog)."""

    def credential_refs(self, action: str, inputs: Mapping[str, Any]) -> list[tuple[str, str]]: ...

    def pod_needs(self, action: str, inputs: Mapping[str, Any]) -> PodNeeds: ...


@dataclass(frozen=True)
class BuiltinAction:
    """A built-in action or code step: the runner runs it; the catalog says which keys it reads and what its pod
    needs (a code step's limits, module file and user of its own)."""

    catalog: PodCatalog


@dataclass(frozen=True)
class Notification:
    """An approval gate's announcement (attempt 0 of the gate's step): a built-in action's pod, labelled apart from
    the gate's attempts so its own egress policy selects it alone (towline.k8s.objects.notification_selector)."""

    catalog: PodCatalog
    event: str
    index: int


@dataclass(frozen=True)
class StepTypeImage:
    """A user step type: the runner prepares (credentials checked, isolation proven, inputs written), then the type's
    image runs with the step protocol's environment (docs/step-protocol.md)."""

    step_type: ResolvedStepType


StepKind = BuiltinAction | Notification | StepTypeImage


@dataclass(frozen=True)
class StepPod:
    """What sets one kind of step pod apart; `build_step_job` adds what every kind has."""

    deadline: int
    keys: Mapping[str, list[str]]
    """Credential alias -> the keys of its Secret the pod mounts."""
    runner_env: Mapping[str, str]
    """The runner's environment of this kind's own, beside what every runner gets."""
    runner_resources: JSON
    containers: tuple[JSON, ...] = ()
    """The kind's own containers after the runner (a step type's image); none: the runner is the step."""
    volumes_before: tuple[JSON, ...] = ()
    """Volumes every container mounts, before the credentials."""
    runner_volumes: tuple[tuple[JSON, JSON], ...] = ()
    """(volume, mount) only the runner has, after the credentials."""
    run_as_user: int | None = None
    image_pull_secrets: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def build_step_job(
    run: RunRef,
    kind: StepKind,
    *,
    job_name: str,
    step_id: str,
    attempt: int,
    action: str,
    inputs: Mapping[str, Any],
    credentials: Mapping[str, str],
    idempotency_key: str,
    timeout_seconds: int | None,
    allow_hosts: Sequence[str] = (),
    allow_private_networks: Sequence[str] = (),
    settings: StepPodSettings,
    created_at: datetime | None = None,
    egress_group: str | None = None,
    resources: StepResources | None = None,
    pod_metadata: PodMetadata | None = None,
) -> JSON:
    """One Job per step attempt of any kind; `backoffLimit: 0` because the engine owns retries.

    `created_at` (when the operator creates the Job) also gives the runner an absolute deadline: the
    kubelet counts `activeDeadlineSeconds` from the Job's start, while the runner's own clock starts
    only once its interpreter is up, which on a busy node can be many seconds later. `egress_group`
    labels the pod for the shared egress policy of its run's steps that reach the same places
    (towline.k8s.egresspolicies). `resources` (the step's own) size the container that runs the step: the runner,
    or a step type's image; `pod_metadata` (the step's own labels and annotations) goes on its pod over the chart's,
    under Towline's own labels.
    """
    traceparent = None if run.trace is None or isinstance(kind, Notification) else attempt_traceparent(
        run.trace, step_id, attempt)
    if isinstance(kind, StepTypeImage):
        pod = step_type_pod(kind.step_type, action=action, inputs=inputs, credentials=credentials,
                            idempotency_key=idempotency_key, timeout_seconds=timeout_seconds,
                            allow_hosts=allow_hosts, settings=settings, resources=resources, traceparent=traceparent)
    else:
        pod = action_pod(kind, job_name=job_name, action=action, inputs=inputs, credentials=credentials,
                         idempotency_key=idempotency_key, timeout_seconds=timeout_seconds, allow_hosts=allow_hosts,
                         allow_private_networks=allow_private_networks, settings=settings, created_at=created_at,
                         resources=resources)
    env = {
        INPUT_ENV: compact(dict(inputs)),
        DEADLINE_SECONDS_ENV: str(step_deadline_seconds(pod.deadline)),
        CREDENTIALS_DIR_ENV: DEFAULT_CREDENTIALS_DIR,
        RESULT_PATH_ENV: DEFAULT_RESULT_PATH,
        # Names only (never values): the runner says which Secret or key is missing and how to add it.
        CREDENTIAL_SECRETS_ENV: compact({alias: credentials[alias] for alias in pod.keys}),
        CREDENTIAL_KEYS_ENV: compact(pod.keys),
        NAMESPACE_ENV: run.namespace,
        **pod.runner_env,
    }
    if traceparent is not None:
        env[TRACEPARENT_ENV] = traceparent
    runner_env = {name: env[name] for name in RUNNER_ENV_ORDER if name in env}
    runner_env.update(settings.extra_env)
    runner_env.update({name: env[name] for name in RUNNER_ENV_LAST if name in env})
    if settings.isolation_probe:
        runner_env[ISOLATION_PROBE_ENV] = settings.isolation_probe
    secret_volumes, secret_mounts = credential_volumes(credentials, pod.keys)
    shared_mounts = [SCRATCH_MOUNT, *[{"name": v["name"], "mountPath": STEP_DIR} for v in pod.volumes_before]]
    runner = container(
        "prepare" if pod.containers else "step", settings.image, runner_env,
        [*shared_mounts, *secret_mounts, *[mount for _, mount in pod.runner_volumes]], pod.runner_resources,
        command=settings.command, args=(PREPARE_FLAG,) if pod.containers else None,
    )
    own = [{**c, "volumeMounts": [*c["volumeMounts"], *secret_mounts]} for c in pod.containers]
    labels = {**step_labels(run, step_id, attempt), **pod.labels}
    if pod_metadata is not None:
        settings = replace(settings, labels={**settings.labels, **pod_metadata.labels},
                           annotations={**settings.annotations, **pod_metadata.annotations})
    job = step_job_manifest(
        run, job_name=job_name, step_id=step_id, labels=labels, deadline=pod.deadline, settings=settings,
        containers=own or [runner], init_containers=[runner] if own else [],
        volumes=[SCRATCH_VOLUME, *pod.volumes_before, *secret_volumes, *[volume for volume, _ in pod.runner_volumes]],
        run_as_user=pod.run_as_user, image_pull_secrets=pod.image_pull_secrets,
    )
    if egress_group is not None:
        job["spec"]["template"]["metadata"]["labels"][LABEL_EGRESS] = egress_group
    return job


RUNNER_ENV_ORDER = (
    ACTION_ENV, INPUT_ENV, IDEMPOTENCY_KEY_ENV, INPUTS_PATH_ENV, DEADLINE_SECONDS_ENV, CREDENTIALS_DIR_ENV,
    RESULT_PATH_ENV, NETWORK_ENV, CREDENTIAL_SECRETS_ENV, CREDENTIAL_KEYS_ENV, NAMESPACE_ENV,
)
RUNNER_ENV_LAST = (DEADLINE_AT_ENV, TRACEPARENT_ENV)
"""Set after the chart's extra environment, which cannot move the deadline or the attempt's span."""


def step_deadline_seconds(deadline: int) -> int:
    """What the step is told its deadline is: the pod's less RESULT_MARGIN_SECONDS, never below one second."""
    return max(1, deadline - RESULT_MARGIN_SECONDS)


def action_pod(
    kind: BuiltinAction | Notification, *, job_name: str, action: str, inputs: Mapping[str, Any],
    credentials: Mapping[str, str], idempotency_key: str, timeout_seconds: int | None, allow_hosts: Sequence[str],
    allow_private_networks: Sequence[str], settings: StepPodSettings, created_at: datetime | None,
    resources: StepResources | None = None,
) -> StepPod:
    """The runner runs the action itself, behind the in-pod guard's network rules."""
    deadline = timeout_seconds or settings.default_timeout_seconds
    needs = kind.catalog.pod_needs(action, inputs)
    env = {
        ACTION_ENV: action,
        IDEMPOTENCY_KEY_ENV: idempotency_key,
        NETWORK_ENV: compact({"allowHosts": list(allow_hosts), "allowPrivateCidrs": list(allow_private_networks)}),
    }
    if created_at is not None:
        env[DEADLINE_AT_ENV] = rfc3339(created_at + timedelta(seconds=step_deadline_seconds(deadline)))
    return StepPod(
        deadline=deadline,
        keys=credential_keys(kind.catalog.credential_refs(action, inputs), credentials),
        runner_env=env,
        runner_resources=container_resources(settings.resources, resources, code_step_limits(needs)),
        runner_volumes=() if needs.config_map_file is None else (config_map_file_volume(*needs.config_map_file),),
        run_as_user=code_user_id(job_name) if needs.own_user else None,
        labels={LABEL_NOTIFICATION: f"{kind.event}-{kind.index}"} if isinstance(kind, Notification) else {},
    )


def step_type_pod(
    step_type: ResolvedStepType, *, action: str, inputs: Mapping[str, Any], credentials: Mapping[str, str],
    idempotency_key: str, timeout_seconds: int | None, allow_hosts: Sequence[str], settings: StepPodSettings,
    resources: StepResources | None = None, traceparent: str | None = None,
) -> StepPod:
    """The runner prepares as an init container; the kubelet starts the type's image only once it exited 0, so
    the user's code never runs before the pod's egress isolation is proven."""
    spec = step_type.spec
    deadline = timeout_seconds or spec.timeout_seconds or settings.default_timeout_seconds
    user_env = step_environment(allow_hosts=allow_hosts, idempotency_key=idempotency_key, step_type=action,
                                deadline_seconds=step_deadline_seconds(deadline), traceparent=traceparent)
    user = container("step", spec.image, user_env,
                     [SCRATCH_MOUNT, {"name": STEP_VOLUME["name"], "mountPath": STEP_DIR, "readOnly": True}],
                     container_resources(settings.resources, spec.resources, resources),
                     command=spec.command, args=spec.args)
    return StepPod(
        deadline=deadline,
        keys=slot_keys(step_type, credentials),
        runner_env={INPUTS_PATH_ENV: DEFAULT_INPUTS_PATH},
        runner_resources=container_resources(settings.resources),
        containers=(user,),
        volumes_before=(STEP_VOLUME,),
        image_pull_secrets=tuple(spec.image_pull_secrets),
    )


def container(
    name: str, image: str, env: Mapping[str, str], mounts: list[JSON], resources: JSON, *,
    command: Sequence[str] | None = None, args: Sequence[str] | None = None,
) -> JSON:
    """One step container: its result in the termination message, hardened to Pod Security "restricted"."""
    body: JSON = {"name": name, "image": image}
    if command is not None:
        body["command"] = list(command)
    if args is not None:
        body["args"] = list(args)
    return {
        **body,
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "volumeMounts": mounts,
        "terminationMessagePath": DEFAULT_RESULT_PATH,
        "terminationMessagePolicy": "File",
        "resources": resources,
        "securityContext": container_security_context(),
    }


def container_security_context() -> JSON:
    """Pod Security "restricted" for one container, with a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def code_step_limits(needs: PodNeeds) -> StepResources | None:
    """The memory and CPU limits a code step declares in its inputs (the sandbox's size), as resources."""
    limits = {"memory": None if needs.memory_limit_bytes is None else str(needs.memory_limit_bytes),
              "cpu": needs.cpu_limit}
    if limits == {"memory": None, "cpu": None}:
        return None
    return StepResources.model_validate({"limits": {name: value for name, value in limits.items() if value}})


def container_resources(defaults: Mapping[str, Mapping[str, str]], *layers: StepResources | None) -> JSON:
    """The chart's defaults (stepPods.resources) with each layer's amounts over them, the later winning.

    A layer that raises a request above a limit it leaves alone raises that limit with it, and one that lowers a
    limit below a request it leaves alone lowers the request: a step asking for 512Mi gets a pod the API server
    accepts whatever the chart's default limit, never one it refuses for a request above its limit.
    """
    requests = dict(defaults.get("requests") or {})
    limits = dict(defaults.get("limits") or {})
    for layer in layers:
        if layer is None:
            continue
        own_requests = layer.requests.model_dump(exclude_none=True)
        own_limits = layer.limits.model_dump(exclude_none=True)
        for name, value in own_requests.items():
            requests[name] = value
            if name in limits and name not in own_limits and quantity_value(limits[name]) < quantity_value(value):
                limits[name] = value
        for name, value in own_limits.items():
            limits[name] = value
            if name in requests and name not in own_requests and quantity_value(requests[name]) > quantity_value(value):
                requests[name] = value
    body: JSON = {}
    if requests:
        body["requests"] = requests
    if limits:
        body["limits"] = limits
    return body


def code_user_id(job_name: str) -> int:
    """A user id of this pod's own, from its Job's name: the code's process limit (RLIMIT_NPROC counts a user's
    processes on the whole node) then counts this pod alone, and a fork loop cannot starve other steps."""
    low, high = CODE_USER_IDS
    return low + int.from_bytes(hashlib.sha256(job_name.encode()).digest()[:8], "big") % (high - low)


def config_map_file_volume(name: str, key: str) -> tuple[JSON, JSON]:
    """One key of a ConfigMap as the file CONFIG_MAP_FILE_PATH, optional so a missing one fails the step by name."""
    directory, _, file_name = CONFIG_MAP_FILE_PATH.rpartition("/")
    volume = {"name": "code-module", "configMap": {"name": name, "optional": True,
                                                   "items": [{"key": key, "path": file_name}]}}
    return volume, {"name": "code-module", "mountPath": directory, "readOnly": True}

"""The operator's settings, from its environment (the chart sets these variables)."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from towline.eventsink import EventsConfig
from towline.k8s.leader import LeaderTimings
from towline.k8s.objects import StepPodSettings
from towline.k8s.shards import MAX_SHARDS
from towline.runtime.steppodconfig import (
    step_affinity,
    step_annotations_setting,
    step_image_pull_secrets,
    step_labels_setting,
    step_node_selector,
    step_priority_class_name,
    step_resources,
    step_tolerations,
)
from towline.runtime.workqueue import DEFAULT_MAX_RETRIES
from towline.tracing import TracingConfig
from towline.validation.codesteps import CodeStepPolicy
from towline.validation.steptypes import StepImagePolicy
from towline_connectors.wire import parse_address_port

log = logging.getLogger(__name__)


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number of seconds; set it to e.g. {default:g}") from None
    if value <= 0:
        raise ValueError(f"{name}={text!r} must be above 0; set it to e.g. {default:g}")
    return value


def _true_or_false(env: Mapping[str, str], name: str, default: str, chart_value: str) -> bool:
    text = env.get(name, default).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {text!r}; set {chart_value} in the chart values to true "
                         "or false")
    return text == "true"


def _whole_number(env: Mapping[str, str], name: str, default: int, fix: str) -> int:
    text = env.get(name, str(default)).strip()
    if not text.isdigit():
        raise ValueError(f"{name}={text!r} must be a whole number{fix}")
    return int(text)


def leader_timings_from(env: Mapping[str, str]) -> LeaderTimings:
    defaults = LeaderTimings()
    timings = LeaderTimings(
        lease_seconds=_number(env, "TOWLINE_LEASE_DURATION_SECONDS", defaults.lease_seconds),
        renew_deadline=_number(env, "TOWLINE_LEASE_RENEW_DEADLINE_SECONDS", defaults.renew_deadline),
        retry_period=_number(env, "TOWLINE_LEASE_RETRY_PERIOD_SECONDS", defaults.retry_period),
    )
    problems = timings.problems()
    if problems:
        raise ValueError(
            "TOWLINE_LEASE_DURATION_SECONDS, TOWLINE_LEASE_RENEW_DEADLINE_SECONDS, TOWLINE_LEASE_RETRY_PERIOD_SECONDS: "
            + "; ".join(problems)
        )
    return timings


def shard_settings(env: Mapping[str, str]) -> tuple[int, int]:
    """TOWLINE_SHARDS (chart `operator.shards`) and TOWLINE_REPLICAS (chart `operator.replicas`): how many
    shards the namespaces are hashed into, one Lease each, and over how many replicas they are spread."""
    found = []
    settings = (("TOWLINE_SHARDS", "operator.shards", 3), ("TOWLINE_REPLICAS", "operator.replicas", 2))
    for name, value, example in settings:
        text = env.get(name, "").strip() or "1"
        if not text.isdigit() or not 1 <= int(text) <= MAX_SHARDS:
            raise ValueError(f"{name}={text!r} must be a whole number from 1 to {MAX_SHARDS}; set {value} in the "
                             f"chart values to e.g. {example}")
        found.append(int(text))
    return found[0], found[1]


def cluster_cidrs(text: str) -> tuple[str, ...]:
    """TOWLINE_CLUSTER_CIDRS (comma or space separated, from the chart's egress values); a bad one stops startup."""
    cidrs = tuple(part for part in text.replace(",", " ").split() if part)
    for cidr in cidrs:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ValueError(
                f"TOWLINE_CLUSTER_CIDRS: {cidr!r} is not a CIDR; set egress.podCIDRs and egress.serviceCIDRs "
                "in the chart values to networks such as 10.244.0.0/16"
            ) from None
    return cidrs


def isolation_probe(env: Mapping[str, str]) -> str | None:
    """The step pods' isolation probe (docs/security-egress-isolation.md); None when switched off.

    TOWLINE_REQUIRE_ISOLATION (chart `egress.requireIsolation`, default true) turns the check on;
    the target is TOWLINE_ISOLATION_PROBE, else the `kubernetes` Service this operator's own pod
    was given, which accepts connections from any unprotected pod and which no step policy opens.
    """
    if not _true_or_false(env, "TOWLINE_REQUIRE_ISOLATION", "true", "egress.requireIsolation"):
        log.warning("egress isolation check is off (egress.requireIsolation: false): a step may make calls "
                    "before its NetworkPolicies are enforced, or on a cluster that never enforces them")
        return None
    target = env.get("TOWLINE_ISOLATION_PROBE", "").strip()
    if not target and env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"):
        host, port = env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not target:
        raise ValueError("egress.requireIsolation is on but there is no isolation probe target: run the operator "
                         "in the cluster (it probes the kubernetes Service) or set TOWLINE_ISOLATION_PROBE to "
                         "an address:port every pod can reach unprotected, e.g. 10.96.0.1:443")
    try:
        parse_address_port(target)
    except ValueError as exc:
        raise ValueError(f"TOWLINE_ISOLATION_PROBE {exc}") from None
    return target


def step_image_policy(env: Mapping[str, str]) -> StepImagePolicy:
    """TOWLINE_STEP_TYPE_IMAGE_PREFIXES (comma separated, each ending at a `/`) and TOWLINE_STEP_TYPE_REQUIRE_DIGEST,
    from the chart's stepTypes values; no prefixes: no user step type is usable."""
    # A prefix ends at a `/`, as the chart's policies render it: `ghcr.io/acme` covers ghcr.io/acme/x, never
    # ghcr.io/acme-evil/x (nor `registry.example.com` registry.example.com.evil.net/x).
    prefixes = tuple(part if part.endswith("/") else f"{part}/"
                     for part in (raw.strip() for raw in env.get("TOWLINE_STEP_TYPE_IMAGE_PREFIXES", "").split(","))
                     if part)
    digest = _true_or_false(env, "TOWLINE_STEP_TYPE_REQUIRE_DIGEST", "false", "stepTypes.requireDigest")
    return StepImagePolicy(allowed_prefixes=prefixes, require_digest=digest)


def code_step_policy(env: Mapping[str, str]) -> CodeStepPolicy:
    """TOWLINE_CODE_STEPS (true/false) and TOWLINE_CODE_STEP_NAMESPACES (comma separated; empty: all), from the
    chart's codeSteps values."""
    enabled = _true_or_false(env, "TOWLINE_CODE_STEPS", "false", "codeSteps.enabled")
    namespaces = tuple(part.strip() for part in env.get("TOWLINE_CODE_STEP_NAMESPACES", "").split(",") if part.strip())
    return CodeStepPolicy(enabled=enabled, namespaces=namespaces)


def archive_enabled(env: Mapping[str, str]) -> bool:
    """TOWLINE_ARCHIVE (true/false), from the chart's archive.enabled."""
    return _true_or_false(env, "TOWLINE_ARCHIVE", "false", "archive.enabled")


DEFAULT_MAX_RUNS_AWAITING_ARCHIVE = 1000


def archive_max_runs_awaiting(env: Mapping[str, str]) -> int:
    """TOWLINE_ARCHIVE_MAX_RUNS_AWAITING (a whole number; 0: no limit), from the chart's archive.maxRunsAwaiting."""
    return _whole_number(env, "TOWLINE_ARCHIVE_MAX_RUNS_AWAITING", DEFAULT_MAX_RUNS_AWAITING_ARCHIVE,
                         " (0: no limit); set archive.maxRunsAwaiting in the chart values, e.g. 1000")


@dataclass(frozen=True)
class OperatorConfig:
    namespace: str
    identity: str
    service_account: str
    pod_settings: StepPodSettings
    workers: int = 16
    """Runs reconciled at once. A pass waits on a few requests in a row (a step's policy, Job and pod; the run's
    status), so passes overlap; Argo's workflow-controller runs 32 workflow workers by default."""
    lease_name: str = "towline-operator"
    """The Lease with one shard; shard i of S has `<lease_name>-shard-<i>-of-<S>`."""
    shards: int = 1
    replicas: int = 1
    """How many replicas the chart runs: a replica takes up to ceil(shards / replicas) shards at once."""
    leader_timings: LeaderTimings = field(default_factory=LeaderTimings)
    max_retries: int = DEFAULT_MAX_RETRIES
    step_image_policy: StepImagePolicy = field(default_factory=StepImagePolicy)
    code_steps: CodeStepPolicy = field(default_factory=CodeStepPolicy)
    watch_namespaces: tuple[str, ...] = ()
    """Empty: every namespace; else only these (the command's --namespace, $TOWLINE_WATCH_NAMESPACES)."""
    archive: bool = False
    """TOWLINE_ARCHIVE (the chart's archive.enabled): every run carries the archive's finalizer until it is archived."""
    archive_max_runs_awaiting: int = DEFAULT_MAX_RUNS_AWAITING_ARCHIVE
    """While the archive is on: at this many ended runs of a namespace not yet archived, no new run starts there
    (0: no limit; the chart's archive.maxRunsAwaiting)."""
    web_view_url: str | None = None
    """TOWLINE_UI_URL (the chart's ui.url): approval notifications link to the gate's page there."""
    tracing: TracingConfig = field(default_factory=TracingConfig)
    """TOWLINE_TRACING_* (the chart's tracing values): where runs' traces go, if anywhere."""
    events: EventsConfig = field(default_factory=EventsConfig)
    """TOWLINE_EVENTS_* (the chart's events.sink values): where runs' CloudEvents go, if anywhere."""

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if env is None else env
        defaults = StepPodSettings()
        pod_settings = StepPodSettings(
            image=env.get("TOWLINE_RUNNER_IMAGE", defaults.image),
            command=tuple(env["TOWLINE_RUNNER_COMMAND"].split()) if env.get("TOWLINE_RUNNER_COMMAND")
            else defaults.command,
            run_as_user=int(env.get("TOWLINE_RUNNER_UID", defaults.run_as_user)),
            # While the archive is on, it sets a step Job's TTL once the Job's logs are in the record.
            ttl_seconds_after_finished=None if archive_enabled(env) else int(
                env.get("TOWLINE_JOB_TTL_SECONDS", str(defaults.ttl_seconds_after_finished))),
            cluster_cidrs=cluster_cidrs(env.get("TOWLINE_CLUSTER_CIDRS", "")),
            isolation_probe=isolation_probe(env),
            image_pull_secrets=step_image_pull_secrets(env),
            node_selector=step_node_selector(env),
            tolerations=step_tolerations(env),
            affinity=step_affinity(env),
            priority_class_name=step_priority_class_name(env),
            resources=step_resources(env),
            labels=step_labels_setting(env),
            annotations=step_annotations_setting(env),
        )
        shards, replicas = shard_settings(env)
        return cls(
            namespace=env.get("TOWLINE_NAMESPACE", "towline-system"),
            identity=env.get("TOWLINE_POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
            service_account=env.get("TOWLINE_SERVICE_ACCOUNT", "towline-operator"),
            pod_settings=pod_settings,
            lease_name=env.get("TOWLINE_LEASE_NAME") or "towline-operator",
            shards=shards,
            replicas=replicas,
            leader_timings=leader_timings_from(env),
            max_retries=_whole_number(env, "TOWLINE_RECONCILE_MAX_RETRIES", DEFAULT_MAX_RETRIES,
                                      f", e.g. {DEFAULT_MAX_RETRIES}"),
            step_image_policy=step_image_policy(env),
            code_steps=code_step_policy(env),
            archive=archive_enabled(env),
            archive_max_runs_awaiting=archive_max_runs_awaiting(env),
            web_view_url=web_view_url(env),
            tracing=TracingConfig.from_environment(env),
            events=EventsConfig.from_environment(env),
        )


def web_view_url(env: Mapping[str, str]) -> str | None:
    """TOWLINE_UI_URL: an http(s) origin, or empty for none (notifications then carry the kubectl commands only)."""
    url = env.get("TOWLINE_UI_URL", "").strip().rstrip("/")
    if not url:
        return None
    if not url.startswith(("https://", "http://")) or "/" in url.split("://", 1)[1] or "?" in url or "#" in url:
        raise ValueError(f"TOWLINE_UI_URL={url!r} must be the web view's origin, like https://towline.example.com; "
                         "set ui.url in the chart's values")
    return url

"""The operator's settings, from its environment (the chart sets these variables)."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from towline.api.common import DNS_SUBDOMAIN_PATTERN
from towline.k8s.leader import LeaderTimings
from towline.k8s.objects import StepPodSettings
from towline.k8s.shards import MAX_SHARDS
from towline.runtime.workqueue import DEFAULT_MAX_RETRIES
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
    require = env.get("TOWLINE_REQUIRE_ISOLATION", "true").strip().lower()
    if require not in ("true", "false"):
        raise ValueError(f"TOWLINE_REQUIRE_ISOLATION must be true or false, not {require!r}; "
                         "set egress.requireIsolation in the chart values to true or false")
    if require == "false":
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
    digest = env.get("TOWLINE_STEP_TYPE_REQUIRE_DIGEST", "false").strip().lower()
    if digest not in ("true", "false"):
        raise ValueError(f"TOWLINE_STEP_TYPE_REQUIRE_DIGEST must be true or false, not {digest!r}; set "
                         "stepTypes.requireDigest in the chart values to true or false")
    return StepImagePolicy(allowed_prefixes=prefixes, require_digest=digest == "true")


def code_step_policy(env: Mapping[str, str]) -> CodeStepPolicy:
    """TOWLINE_CODE_STEPS (true/false) and TOWLINE_CODE_STEP_NAMESPACES (comma separated; empty: all), from the
    chart's codeSteps values."""
    enabled = env.get("TOWLINE_CODE_STEPS", "false").strip().lower()
    if enabled not in ("true", "false"):
        raise ValueError(f"TOWLINE_CODE_STEPS must be true or false, not {enabled!r}; set codeSteps.enabled in the "
                         "chart values to true or false")
    namespaces = tuple(part.strip() for part in env.get("TOWLINE_CODE_STEP_NAMESPACES", "").split(",") if part.strip())
    return CodeStepPolicy(enabled=enabled == "true", namespaces=namespaces)


def archive_enabled(env: Mapping[str, str]) -> bool:
    """TOWLINE_ARCHIVE (true/false), from the chart's archive.enabled."""
    enabled = env.get("TOWLINE_ARCHIVE", "false").strip().lower()
    if enabled not in ("true", "false"):
        raise ValueError(f"TOWLINE_ARCHIVE must be true or false, not {enabled!r}; set archive.enabled in the chart "
                         "values to true or false")
    return enabled == "true"


DEFAULT_MAX_RUNS_AWAITING_ARCHIVE = 1000


def archive_max_runs_awaiting(env: Mapping[str, str]) -> int:
    """TOWLINE_ARCHIVE_MAX_RUNS_AWAITING (a whole number; 0: no limit), from the chart's archive.maxRunsAwaiting."""
    text = env.get("TOWLINE_ARCHIVE_MAX_RUNS_AWAITING", str(DEFAULT_MAX_RUNS_AWAITING_ARCHIVE)).strip()
    if not text.isdigit():
        raise ValueError(f"TOWLINE_ARCHIVE_MAX_RUNS_AWAITING={text!r} must be a whole number (0: no limit); set "
                         "archive.maxRunsAwaiting in the chart values, e.g. 1000")
    return int(text)


_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_TOLERATION_FIELDS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def step_image_pull_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """TOWLINE_STEP_IMAGE_PULL_SECRETS (comma separated names, from the chart's stepPods.imagePullSecrets or the
    top-level imagePullSecrets).

    This and the other step pod settings are checked here as the API server would check them, so a bad value
    stops the operator at start, naming the chart value, rather than failing every step Job.
    """
    text = env.get("TOWLINE_STEP_IMAGE_PULL_SECRETS", "")
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for name in names:
        if len(name) > 253 or not re.match(DNS_SUBDOMAIN_PATTERN, name):
            raise ValueError(f"TOWLINE_STEP_IMAGE_PULL_SECRETS: {name!r} is not a Secret name; set "
                             "stepPods.imagePullSecrets (or imagePullSecrets) in the chart values to "
                             "[{name: regcred}] with the names of kubernetes.io/dockerconfigjson Secrets")
    return names


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not re.match(DNS_SUBDOMAIN_PATTERN, prefix)):
        return f"the prefix of label key {key!r} is not a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME.match(name):
        return (f"label key {key!r} must end in a name of at most 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    return None


def _is_label_value(value: str) -> bool:
    return not value or (len(value) <= 63 and _LABEL_NAME.match(value) is not None)


def _json_setting(env: Mapping[str, str], name: str, empty: Any, fix: str) -> Any:
    text = env.get(name, "").strip()
    if not text:
        return empty
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON ({exc.msg}){fix}") from None


def step_node_selector(env: Mapping[str, str]) -> dict[str, str]:
    """TOWLINE_STEP_NODE_SELECTOR (a JSON object of labels, from the chart's stepPods.nodeSelector)."""
    fix = "; set stepPods.nodeSelector in the chart values to a map of node labels, e.g. {pool: steps}"
    selector = _json_setting(env, "TOWLINE_STEP_NODE_SELECTOR", {}, fix)
    if not isinstance(selector, dict):
        raise ValueError(f"TOWLINE_STEP_NODE_SELECTOR must be a JSON object{fix}")
    for key, value in selector.items():
        problem = _label_key_problem(key)
        if problem is None and not isinstance(value, str):
            problem = f"the value of {key!r} must be a string, not {json.dumps(value)}"
        elif problem is None and not _is_label_value(value):
            problem = f"the value of {key!r}, {value!r}, is not a label value"
        if problem:
            raise ValueError(f"TOWLINE_STEP_NODE_SELECTOR: {problem}{fix}")
    return selector


def _toleration_problems(toleration: Any) -> Iterator[str]:
    """What the API server would refuse in one toleration (core/v1 validation)."""
    if not isinstance(toleration, dict):
        yield f"{json.dumps(toleration)} is not an object"
        return
    unknown = sorted(set(toleration) - _TOLERATION_FIELDS)
    if unknown:
        yield f"unknown field {unknown[0]!r} (a toleration has {', '.join(sorted(_TOLERATION_FIELDS))})"
    if not all(isinstance(toleration.get(name, ""), str) for name in ("key", "operator", "value", "effect")):
        yield "key, operator, value and effect must be strings"
        return
    key, operator = toleration.get("key", ""), toleration.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        yield f"operator must be Equal or Exists, not {operator!r}"
    if operator == "Exists" and toleration.get("value"):
        yield "a toleration with operator Exists has no value"
    if operator == "Equal" and not _is_label_value(toleration.get("value", "")):
        yield f"value {toleration['value']!r} is not a label value"
    if not key and operator != "Exists":
        yield "a toleration without a key must have operator Exists"
    if key and (problem := _label_key_problem(key)):
        yield problem
    if toleration.get("effect", "") not in _TOLERATION_EFFECTS:
        yield f"effect must be one of NoSchedule, PreferNoSchedule, NoExecute, not {toleration['effect']!r}"
    if "tolerationSeconds" in toleration:
        seconds = toleration["tolerationSeconds"]
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            yield "tolerationSeconds must be a whole number"
        if toleration.get("effect") != "NoExecute":
            yield "tolerationSeconds applies only to effect NoExecute"


def step_tolerations(env: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """TOWLINE_STEP_TOLERATIONS (a JSON list of tolerations, from the chart's stepPods.tolerations)."""
    fix = ("; set stepPods.tolerations in the chart values to a list of tolerations, e.g. "
           "[{key: dedicated, operator: Equal, value: steps, effect: NoSchedule}]")
    tolerations = _json_setting(env, "TOWLINE_STEP_TOLERATIONS", [], fix)
    if not isinstance(tolerations, list):
        raise ValueError(f"TOWLINE_STEP_TOLERATIONS must be a JSON list{fix}")
    for index, toleration in enumerate(tolerations):
        problem = next(_toleration_problems(toleration), None)
        if problem:
            raise ValueError(f"TOWLINE_STEP_TOLERATIONS[{index}]: {problem}{fix}")
    return tuple(tolerations)


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
        )
        retries_text = env.get("TOWLINE_RECONCILE_MAX_RETRIES", str(DEFAULT_MAX_RETRIES))
        if not retries_text.isdigit():
            raise ValueError(f"TOWLINE_RECONCILE_MAX_RETRIES={retries_text!r} must be a whole number, e.g. "
                             f"{DEFAULT_MAX_RETRIES}")
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
            max_retries=int(retries_text),
            step_image_policy=step_image_policy(env),
            code_steps=code_step_policy(env),
            archive=archive_enabled(env),
            archive_max_runs_awaiting=archive_max_runs_awaiting(env),
        )

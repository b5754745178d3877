"""Builders of the Kubernetes objects a run owns: the Job around a step's pod, egress policies, Approvals.

Pure functions from engine actions to manifests (no API calls here). The pod
is hardened to Pod Security "restricted": non-root, no privilege escalation,
all capabilities dropped, read-only root filesystem, RuntimeDefault seccomp,
no service account token. What runs in it, for each kind of step, is
towline.k8s.stepjobs's to build.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from towline.api.common import API_VERSION
from towline.engine.actions import CreateApproval
from towline.engine.traces import TracedRun
from towline.jsontypes import JSON
from towline.k8s.labels import (
    ANNOTATION_ALLOW_HOSTS,
    ANNOTATION_STEP_ID,
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_NOTIFICATION,
    LABEL_RUN,
    LABEL_STEP,
    LABEL_STEP_POD,
    LABEL_WORKFLOW,
    MANAGER,
    STEP_JOB_MANAGER,
    identifier_label,
    is_towline_key,
)
from towline.k8s.networks import connector_peers, forbidden_networks, ip_block_peers, needs_dns
from towline_connectors.wire import parse_address_port, rfc3339

DEFAULT_DENY_POLICY = "towline-steps-default-deny"


DEFAULT_STEP_RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"},
}
"""The chart's stepPods.resources default."""
MESH_OPT_OUT_ANNOTATIONS: Mapping[str, str] = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
"""The chart's stepPods.annotations default: a sidecar proxy would route the step's traffic around its egress policy
and make a pod the step-objects admission policy refuses (docs/configuration.md, "Service meshes")."""


@dataclass(frozen=True)
class RunRef:
    """The identity of the run that owns what is built."""

    name: str
    namespace: str
    uid: str
    workflow: str
    trace: TracedRun | None = None
    """The run's trace while the operator exports traces: each step attempt's containers get its TRACEPARENT."""

    def owner_reference(self) -> JSON:
        return {
            "apiVersion": API_VERSION,
            "kind": "WorkflowRun",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class StepPodSettings:
    """Operator-wide settings for step pods (from the Helm values)."""

    image: str = "ghcr.io/towline/runner:0.1.0"
    command: tuple[str, ...] = ("python3", "-m", "towline_connectors.runner")
    run_as_user: int = 65532
    ttl_seconds_after_finished: int | None = 86400
    """A step Job's `ttlSecondsAfterFinished`; None while the archive is on: the archive sets it once the Job's pod's
    logs are in the record (towline.archive.jobttl), so no TTL can take a log the record does not hold."""
    default_timeout_seconds: int = 600
    extra_env: Mapping[str, str] = field(default_factory=dict)
    cluster_cidrs: tuple[str, ...] = ()
    """The cluster's pod and service CIDRs: carved out of every step's egress like private ranges."""
    isolation_probe: str | None = None
    """`address:port` the runner must find blocked before its action runs; never opened by any step
    policy (docs/security-egress-isolation.md). None: no check (unsafe)."""
    image_pull_secrets: tuple[str, ...] = ()
    """Pull secrets (names, in the step's namespace) for every step pod: they have no ServiceAccount of
    their own to carry them."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    priority_class_name: str = ""
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: dict(DEFAULT_STEP_RESOURCES))
    """Every step container's requests and limits unless its step (or step type) sets its own (stepPods.resources):
    a CPU limit too, so a namespace ResourceQuota on limits.cpu admits step pods."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """More labels for every step pod (stepPods.labels): never a towline.dev/ one, which Towline's own win over."""
    annotations: Mapping[str, str] = field(default_factory=lambda: dict(MESH_OPT_OUT_ANNOTATIONS))
    """Annotations of every step pod (stepPods.annotations); by default, keep a service mesh's sidecar out."""


def owned_by_run(
    run: RunRef, api_version: str, kind: str, name: str, *, labels: Mapping[str, str], spec: JSON,
    annotations: Mapping[str, str] | None = None,
) -> JSON:
    """An object in the run's namespace that the run owns: the garbage collector deletes it with the run."""
    metadata: JSON = {"name": name, "namespace": run.namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    metadata["ownerReferences"] = [run.owner_reference()]
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def step_labels(run: RunRef, step_id: str, attempt: int | None = None) -> dict[str, str]:
    labels = {
        LABEL_WORKFLOW: run.workflow,
        LABEL_RUN: run.name,
        LABEL_STEP: identifier_label(step_id),
        LABEL_MANAGED_BY: MANAGER,
    }
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    return labels


def step_selector(run: RunRef, step_id: str) -> dict[str, str]:
    """The labels that select one step's pods in the run."""
    return {LABEL_RUN: run.name, LABEL_STEP: identifier_label(step_id)}


def notification_selector(run: RunRef, step_id: str, event: str, index: int) -> JSON:
    """The labels that select exactly one notification Job's pod."""
    return {**step_selector(run, step_id), LABEL_NOTIFICATION: f"{event}-{index}"}


def step_job_manifest(
    run: RunRef, *, job_name: str, step_id: str, labels: Mapping[str, str], deadline: int,
    settings: StepPodSettings, containers: list[JSON], volumes: list[JSON], init_containers: Sequence[JSON] = (),
    run_as_user: int | None = None, image_pull_secrets: Sequence[str] = (),
) -> JSON:
    """The Job around a step's containers: owned by the run, never retried, no token; its pod and status are the
    operator's to keep (`managedBy`, towline.k8s.steppods), not the cluster's Job controller's.

    `image_pull_secrets` (a step type's own) come before the operator-wide ones, each name once.
    """
    # Towline's own labels last: the NetworkPolicies and admission policies select on them.
    own_labels = {key: value for key, value in settings.labels.items() if not is_towline_key(key)}
    pod_labels = {**own_labels, **labels, LABEL_STEP_POD: "true"}
    user = settings.run_as_user if run_as_user is None else run_as_user
    pod_spec: JSON = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "activeDeadlineSeconds": deadline,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": user,
            "runAsGroup": user,
            "fsGroup": user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
        "volumes": volumes,
    }
    if init_containers:
        pod_spec["initContainers"] = list(init_containers)
    pull_secrets = dict.fromkeys([*image_pull_secrets, *settings.image_pull_secrets])
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(toleration) for toleration in settings.tolerations]
    if settings.affinity:
        pod_spec["affinity"] = dict(settings.affinity)
    if settings.priority_class_name:
        pod_spec["priorityClassName"] = settings.priority_class_name
    template_meta: JSON = {"labels": pod_labels}
    annotations = {key: value for key, value in settings.annotations.items() if not is_towline_key(key)}
    if annotations:
        template_meta["annotations"] = annotations
    job_spec: JSON = {
        "managedBy": STEP_JOB_MANAGER,
        "backoffLimit": 0,
        "activeDeadlineSeconds": deadline,
        "template": {"metadata": template_meta, "spec": pod_spec},
    }
    if settings.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    # Labels are DNS-safe and lossy (`_` -> `-`); the exact step id rides along as an annotation.
    return owned_by_run(run, "batch/v1", "Job", job_name, labels=labels, spec=job_spec,
                        annotations={ANNOTATION_STEP_ID: step_id})


def build_default_deny_policy(namespace: str) -> JSON:
    """Every step pod in the namespace starts with no ingress and no egress at all."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": DEFAULT_DENY_POLICY,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGER},
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_STEP_POD: "true"}},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


def egress_rules(
    *,
    egress: Sequence[Mapping[str, Any]],
    connector_ports: Sequence[int],
    allow_hosts: Sequence[str] = (),
    allow_private_networks: Sequence[str] = (),
    cluster_cidrs: Sequence[str] = (),
    never_open: Sequence[str] = (),
) -> list[JSON]:
    """DNS (when the step may resolve names), the step's declared CIDRs, and the connector's ports: never
    what the in-pod guard refuses.

    Every peer carves out the ranges the runner's SSRF guard blocks (private,
    loopback, link-local, CGNAT, metadata, NAT64 local-use ...) plus the
    cluster's pod and service CIDRs, except where the step opted into a private
    range. `never_open` (the isolation probe's address) stays carved out whatever the
    step opted into, like the metadata addresses. NetworkPolicy cannot name hosts: when `allow_hosts` are all IP
    addresses the connector's ports open to exactly those, otherwise to public
    address space, and the guard enforces the names inside the pod.
    """
    forbidden = forbidden_networks(allow_private_networks, cluster_cidrs, never_open)
    rules: list[JSON] = []
    if needs_dns(egress, connector_ports, allow_hosts):
        # DNS is a way out for a compromised step whatever else is closed (docs/security-egress-isolation.md).
        rules.append({
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        })
    for rule in egress:
        peers = ip_block_peers(ipaddress.ip_network(rule["cidr"], strict=False), forbidden)
        if not peers:
            continue  # wholly inside a range the guard refuses: the pod could never use it
        entry: JSON = {"to": peers}
        if rule.get("ports"):
            entry["ports"] = [{"protocol": "TCP", "port": p} for p in rule["ports"]]
        rules.append(entry)
    if connector_ports:
        peers = connector_peers(allow_hosts, forbidden)
        if peers:
            rules.append({"to": peers, "ports": [{"protocol": "TCP", "port": p} for p in sorted(set(connector_ports))]})
    return rules


def build_step_egress_policy(
    run: RunRef, *, name: str, step_id: str, rules: list[JSON], allow_hosts: Sequence[str] = (),
    pod_selector: Mapping[str, str] | None = None,
) -> JSON:
    """The egress policy (`rules`: `egress_rules`) of one step's pods, or of the one pod `pod_selector` selects (an
    approval notification's, `notification_selector`). The steps of a run share theirs instead
    (towline.k8s.egresspolicies.build_shared_egress_policy, which takes the same rules)."""
    selector = step_selector(run, step_id) if pod_selector is None else pod_selector
    return egress_policy(run, name=name, labels=step_labels(run, step_id), pod_selector=selector, rules=rules,
                         allow_hosts=allow_hosts)


def egress_policy(
    run: RunRef, *, name: str, labels: Mapping[str, str], pod_selector: Mapping[str, str], rules: list[JSON],
    allow_hosts: Sequence[str],
) -> JSON:
    """An egress NetworkPolicy owned by the run; the hosts the in-pod guard allows ride along as an annotation."""
    return owned_by_run(
        run, "networking.k8s.io/v1", "NetworkPolicy", name, labels=labels,
        spec={"podSelector": {"matchLabels": dict(pod_selector)}, "policyTypes": ["Egress"], "egress": rules},
        annotations=allow_hosts_annotation(allow_hosts),
    )


def allow_hosts_annotation(allow_hosts: Sequence[str]) -> dict[str, str]:
    return {ANNOTATION_ALLOW_HOSTS: ",".join(allow_hosts)} if allow_hosts else {}


def isolation_probe_network(probe: str | None) -> tuple[str, ...]:
    """The isolation probe's address as a host network, for `never_open`; () without a probe."""
    if not probe:
        return ()
    address = ipaddress.ip_address(parse_address_port(probe)[0])
    return (f"{address}/{address.max_prefixlen}",)


def build_approval(run: RunRef, gate: CreateApproval) -> JSON:
    """The object a person patches to decide; owned by the run so it goes with it."""
    spec: JSON = {
        "runName": run.name,
        "workflowName": run.workflow,
        "step": gate.step_id,
        "message": gate.message,
        "preview": dict(gate.preview),
        "approvers": gate.approvers.to_wire(),
        "fourEyes": gate.four_eyes,
        "expiresAt": rfc3339(gate.expires_at, timespec="seconds"),
    }
    if gate.requested_by:
        spec["requestedBy"] = gate.requested_by
    if gate.earlier_requesters:
        spec["earlierRequesters"] = list(gate.earlier_requesters)
    if gate.message_from_inputs:
        spec["messageFromInputs"] = True
    return owned_by_run(run, API_VERSION, "Approval", gate.name, labels=step_labels(run, gate.step_id), spec=spec)

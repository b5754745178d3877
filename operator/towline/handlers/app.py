"""The operator process: kopf watches feed work queues; the leader reconciles.

Where kopf keeps its bookkeeping: nowhere on our objects. Towline registers
only `@kopf.on.event` handlers, which have no progress or diff-base state, and
posting kopf's own events is off, so kopf never writes an annotation, a label
or a finalizer to a Workflow. Every watch event merely enqueues a key;
reconciles read the object afresh.

HA: a coordination.k8s.io Lease (see towline.k8s.leader). Every replica
watches; only the Lease holder reconciles and fires schedules.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from towline.api.workflow import LastRun
from towline.engine import TERMINAL_RUN_PHASES
from towline.handlers.history import enforce_history_limits
from towline.handlers.runs import reconcile_run
from towline.handlers.workflows import reconcile_workflow
from towline.handlers.workqueue import Key, WorkQueue
from towline.k8s.actions import ActionContext
from towline.k8s.client import KubeApi
from towline.k8s.leader import LeaderElector
from towline.k8s.objects import LABEL_RUN, LABEL_STEP_POD, StepPodSettings
from towline.validation import connector_catalog
from towline_connectors.wire import parse_address_port

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorConfig:
    namespace: str
    identity: str
    service_account: str
    pod_settings: StepPodSettings
    workers: int = 4
    lease_name: str = "towline-operator"

    @classmethod
    def from_environment(cls) -> OperatorConfig:
        env = os.environ
        defaults = StepPodSettings()
        pod_settings = StepPodSettings(
            image=env.get("TOWLINE_RUNNER_IMAGE", defaults.image),
            command=tuple(env["TOWLINE_RUNNER_COMMAND"].split()) if env.get("TOWLINE_RUNNER_COMMAND")
            else defaults.command,
            run_as_user=int(env.get("TOWLINE_RUNNER_UID", defaults.run_as_user)),
            ttl_seconds_after_finished=int(env.get("TOWLINE_JOB_TTL_SECONDS", defaults.ttl_seconds_after_finished)),
            cluster_cidrs=cluster_cidrs(env.get("TOWLINE_CLUSTER_CIDRS", "")),
            isolation_probe=isolation_probe(env),
        )
        return cls(
            namespace=env.get("TOWLINE_NAMESPACE", "towline-system"),
            identity=env.get("TOWLINE_POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
            service_account=env.get("TOWLINE_SERVICE_ACCOUNT", "towline-operator"),
            pod_settings=pod_settings,
        )


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


@dataclass
class Operator:
    """Shared state of one operator process; handlers and reconciles get it passed in."""

    config: OperatorConfig
    api: KubeApi
    runs: WorkQueue = field(default_factory=WorkQueue)
    workflows: WorkQueue = field(default_factory=WorkQueue)
    run_bodies: dict[Key, dict[str, Any]] = field(default_factory=dict)
    workflow_keys: set[Key] = field(default_factory=set)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.catalog = connector_catalog()
        self.leader = LeaderElector(
            self.api, namespace=self.config.namespace, name=self.config.lease_name, identity=self.config.identity
        )
        self.action_context = ActionContext(
            api=self.api, pod_settings=self.config.pod_settings, connector_ports=self.catalog.connector_ports
        )

    @property
    def identity_user(self) -> str:
        return f"system:serviceaccount:{self.config.namespace}:{self.config.service_account}"

    def last_run_of(self, namespace: str, workflow: str) -> LastRun | None:
        mine = [
            body for (ns, _), body in self.run_bodies.items()
            if ns == namespace and body.get("spec", {}).get("workflowRef", {}).get("name") == workflow
        ]
        if not mine:
            return None
        latest = max(mine, key=lambda b: b["metadata"].get("creationTimestamp", ""))
        status = latest.get("status") or {}
        return LastRun(name=latest["metadata"]["name"], phase=status.get("phase", "Pending"),
                       started_at=status.get("startedAt"))

    async def on_run_finished(self, run: dict[str, Any]) -> None:
        """Trim the workflow's history and refresh its status (lastRun) with the run's final phase."""
        namespace = run["metadata"]["namespace"]
        workflow = run["spec"]["workflowRef"]["name"]
        key = (namespace, run["metadata"]["name"])
        if key in self.run_bodies:
            # The watch event with the final status may not have arrived yet; lastRun must not lag.
            self.run_bodies[key]["status"] = dict(run.get("status") or {})
        await enforce_history_limits(self.api, namespace, workflow)
        self.workflows.add((namespace, workflow))

    async def start(self) -> None:
        self.tasks.append(asyncio.create_task(self.leader.run(), name="leader"))
        self.tasks.append(asyncio.create_task(self.runs.run_delayed(), name="runs-delayed"))
        self.tasks.append(asyncio.create_task(self.workflows.run_delayed(), name="workflows-delayed"))
        for index in range(self.config.workers):
            self.tasks.append(asyncio.create_task(
                self.runs.run_worker(self._leading(self._reconcile_run, self.runs)), name=f"run-worker-{index}"))
        self.tasks.append(asyncio.create_task(
            self.workflows.run_worker(self._leading(self._reconcile_workflow, self.workflows)), name="wf-worker"))
        self.tasks.append(asyncio.create_task(self._requeue_on_leadership(), name="leadership-requeue"))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.api.close()

    def _leading(
        self, process: Callable[[Key], Awaitable[None]], queue: WorkQueue
    ) -> Callable[[Key], Awaitable[None]]:
        """Only the Lease holder acts; followers re-queue everything when they take over."""

        async def guarded(key: Key) -> None:
            if self.leader.is_leader:
                await process(key)

        return guarded

    async def _requeue_on_leadership(self) -> None:
        while True:
            await self.leader.became_leader.wait()
            for key in list(self.run_bodies):
                self.runs.add(key)
            for key in list(self.workflow_keys):
                self.workflows.add(key)
            while self.leader.is_leader:
                await asyncio.sleep(1)

    async def _reconcile_run(self, key: Key) -> None:
        wake_at = await reconcile_run(self, *key)
        if wake_at is not None:
            self.runs.add_at(key, wake_at)

    async def _reconcile_workflow(self, key: Key) -> None:
        wake_at = await reconcile_workflow(self, *key)
        if wake_at is not None:
            self.workflows.add_at(key, wake_at)


def build_registry(config: OperatorConfig, kubeconfig: str | None = None) -> kopf.OperatorRegistry:
    """kopf wiring: every handler is a one-liner that enqueues a key."""
    registry = kopf.OperatorRegistry()
    holder: dict[str, Operator] = {}

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.watching.server_timeout = 300
        operator = Operator(config=config, api=await KubeApi.connect(kubeconfig))
        holder["operator"] = operator
        await operator.start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        if "operator" in holder:
            await holder["operator"].stop()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return kopf.login_with_service_account(**kwargs)
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.event("towline.dev", "v1alpha1", "workflows", registry=registry)
    async def workflow_event(**kwargs: Any) -> None:
        event, key = kwargs["event"], (kwargs["namespace"], kwargs["name"])
        if event.get("type") == "DELETED":
            holder["operator"].workflow_keys.discard(key)
            return
        holder["operator"].workflow_keys.add(key)
        holder["operator"].workflows.add(key)

    @kopf.on.event("towline.dev", "v1alpha1", "workflowruns", registry=registry)
    async def run_event(**kwargs: Any) -> None:
        operator = holder["operator"]
        event, body = kwargs["event"], kwargs["body"]
        key = (kwargs["namespace"], kwargs["name"])
        if event.get("type") == "DELETED":
            operator.run_bodies.pop(key, None)
            return
        operator.run_bodies[key] = {"metadata": dict(body["metadata"]), "spec": dict(body["spec"]),
                                    "status": dict(body.get("status") or {})}
        if (body.get("status") or {}).get("phase") not in TERMINAL_RUN_PHASES or event.get("type") is None:
            operator.runs.add(key)

    @kopf.on.event("batch", "v1", "jobs", labels={LABEL_RUN: kopf.PRESENT}, registry=registry)
    async def job_event(**kwargs: Any) -> None:
        holder["operator"].runs.add((kwargs["namespace"], kwargs["labels"][LABEL_RUN]))

    @kopf.on.event("", "v1", "pods", labels={LABEL_STEP_POD: "true"}, registry=registry)
    async def pod_event(**kwargs: Any) -> None:
        # A step's progress arrives through its Job; a pod matters on its own only when it
        # cannot start (e.g. a missing Secret), which only the pod's waiting state tells.
        statuses = (kwargs["status"] or {}).get("containerStatuses") or []
        if any(((c.get("state") or {}).get("waiting") or {}).get("message") for c in statuses):
            holder["operator"].runs.add((kwargs["namespace"], kwargs["labels"][LABEL_RUN]))

    @kopf.on.event("towline.dev", "v1alpha1", "approvals", registry=registry)
    async def approval_event(**kwargs: Any) -> None:
        holder["operator"].runs.add((kwargs["namespace"], kwargs["spec"].get("runName", "")))

    return registry


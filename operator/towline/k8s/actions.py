"""Carry out the engine's actions against the API server, idempotently.

Every create is safe to repeat: names are deterministic and a 409 adopts what
exists. Deletes of what is already gone succeed. Nothing here decides
anything; it only does what the engine asked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, assert_never

from towline.api.approval import approvers_line
from towline.engine import actions as engine_actions
from towline.engine.steps import EGRESS_ISOLATION_MISSING
from towline.jsontypes import JSON
from towline.k8s.client import APPROVALS, EVENTS, JOBS, NETWORK_POLICIES, ApiError, KubeApi
from towline.k8s.concurrency import side_by_side
from towline.k8s.egresspolicies import EgressPolicies, build_shared_egress_policy
from towline.k8s.isolationreports import IsolationFailureReports
from towline.k8s.labels import LABEL_EGRESS
from towline.k8s.objects import (
    DEFAULT_DENY_POLICY,
    RunRef,
    StepPodSettings,
    build_approval,
    build_default_deny_policy,
    build_step_egress_policy,
    egress_rules,
    isolation_probe_network,
    notification_selector,
)
from towline.k8s.observe import managed_by_operator
from towline.k8s.owners import controller_uid
from towline.k8s.stepjobs import BuiltinAction, Notification, PodCatalog, StepTypeImage, build_step_job
from towline.k8s.steppods import release_step_pod, start_step_pod
from towline.k8s.subflows import create_child_run, set_child_run
from towline.logs import log_context
from towline.metrics import record_isolation_missing
from towline_connectors.wire import rfc3339

log = logging.getLogger(__name__)

PARALLEL_CREATES = 8
"""Step Jobs (each with its egress policy) one pass creates at once."""


class DefaultDenyPolicies:
    """Namespaces whose default-deny policy was last seen as it must be: by the watch, a read or a write.

    The NetworkPolicy watch clears a namespace as soon as it shows the policy deleted or changed,
    so the next step Job reads it and puts it back; until then no step Job costs a read. The answer
    to a read or write counts only when no watch event for the namespace arrived while it was under
    way: the event may be newer, and resourceVersions are opaque, never ordered.
    """

    def __init__(self) -> None:
        self._intact: set[str] = set()
        self._events: dict[str, int] = {}

    def saw(self, policy: JSON, *, deleted: bool = False) -> None:
        """A watch event: the policy's newest state (the watch delivers in order)."""
        namespace = policy["metadata"]["namespace"]
        self._events[namespace] = self._events.get(namespace, 0) + 1
        self._record(namespace, None if deleted else policy)

    def asking(self, namespace: str) -> int:
        """Before a read or write: a mark `answered` compares with."""
        return self._events.get(namespace, 0)

    def answered(self, policy: JSON, mark: int) -> None:
        """The answer to a read or write begun at `mark`, ignored when the watch spoke in between."""
        namespace = policy["metadata"]["namespace"]
        if self._events.get(namespace, 0) == mark:
            self._record(namespace, policy)

    def _record(self, namespace: str, policy: JSON | None) -> None:
        if policy is not None and policy.get("spec") == build_default_deny_policy(namespace)["spec"]:
            self._intact.add(namespace)
        else:
            self._intact.discard(namespace)

    def intact(self, namespace: str) -> bool:
        return namespace in self._intact

    def keep_only(self, namespaces: set[str], scope: str | None) -> None:
        """A (re-)list of the policies in `scope` (None: every namespace) showed them in `namespaces`: any other
        namespace there is no longer taken as intact (a deletion the watch missed while it was down)."""
        for namespace in list(self._intact):
            if (scope is None or namespace == scope) and namespace not in namespaces:
                self._intact.discard(namespace)
                self._events[namespace] = self._events.get(namespace, 0) + 1  # as a DELETED event would


class StepCatalog(PodCatalog, Protocol):
    """What creating a step's Job and egress policy asks of the catalog (towline.validation.catalog)."""

    def connector_ports(self, action: str, inputs: Mapping[str, Any]) -> list[int]: ...

    def is_code(self, action: str) -> bool: ...


@dataclass
class ActionContext:
    """What carrying out actions needs besides the action itself."""

    api: KubeApi
    pod_settings: StepPodSettings
    catalog: StepCatalog
    """The built-in actions' metadata: the TCP ports an action's declared destinations use (its step's egress
    policy opens them), whether it runs the author's own code (its ports never open without allowHosts), the
    Secret keys it reads and what its pod needs."""
    reporter: str = "towline-operator"
    remember: Callable[[JSON], None] | None = None
    """Told every Job and Approval a create returned (made or adopted), before its watch event arrives."""
    isolation_reports: IsolationFailureReports = field(default_factory=IsolationFailureReports)
    api_server_networks: Callable[[], tuple[str, ...]] = lambda: ()
    """The API server's addresses as host networks, excepted from every step policy; raises while unknown."""
    default_deny: DefaultDenyPolicies | None = None
    """Fed by a NetworkPolicy watch; None: read the default-deny policy before every step Job."""
    egress_policies: EgressPolicies = field(default_factory=EgressPolicies)
    """The shared step egress policies made lately: a run's steps of one egress make one between them."""


async def apply_actions(context: ActionContext, run: RunRef, actions: Iterable[engine_actions.Action]) -> None:
    """In order, except that step Jobs started in the same pass are created side by side (a fan-out)
    and Events are recorded last (they report; nothing waits for them)."""
    jobs: list[engine_actions.Action] = []
    events: list[engine_actions.Action] = []
    for action in actions:
        if isinstance(action, engine_actions.CreateStepJob):
            jobs.append(action)
            continue
        if isinstance(action, engine_actions.EmitEvent):
            events.append(action)
            continue
        await _apply_together(context, run, jobs)
        jobs = []
        await _apply_logged(context, run, action)
    await _apply_together(context, run, jobs)
    for event in events:
        await _apply_logged(context, run, event)


async def _apply_together(context: ActionContext, run: RunRef, actions: list[engine_actions.Action]) -> None:
    await side_by_side((_apply_logged(context, run, action) for action in actions), PARALLEL_CREATES)


async def _apply_logged(context: ActionContext, run: RunRef, action: engine_actions.Action) -> None:
    step = getattr(action, "step_id", None)
    with log_context(step=step, attempt=getattr(action, "attempt", None) if step else None):
        await _apply(context, run, action)


async def _apply(context: ActionContext, run: RunRef, action: engine_actions.Action) -> None:
    if isinstance(action, engine_actions.CreateStepJob):
        await create_step_job(context, run, action)
    elif isinstance(action, engine_actions.CreateNotificationJob):
        await create_notification_job(context, run, action)
    elif isinstance(action, engine_actions.CreateApproval):
        await create_approval(context, run, action)
    elif isinstance(action, engine_actions.CloseApproval):
        await set_approval_phase(context.api, run.namespace, action.name, action.phase)
    elif isinstance(action, engine_actions.RecordApprovalDecision):
        decided_at = rfc3339(action.decided_at, timespec="seconds")
        await set_approval_phase(context.api, run.namespace, action.name, action.phase, decided_at=decided_at)
    elif isinstance(action, engine_actions.DeleteJob):
        await release_step_pod(context.api, run.namespace, action.job_name)  # its pod goes with it
        await context.api.delete(JOBS.path(run.namespace, action.job_name))
    elif isinstance(action, engine_actions.CreateChildRun):
        await create_child_run(context.api, run, action)
    elif isinstance(action, engine_actions.SetChildRun):
        await set_child_run(context.api, run.namespace, action)
    elif isinstance(action, engine_actions.EmitEvent) and action.reason == EGRESS_ISOLATION_MISSING:
        record_isolation_missing(run.namespace)
        report = context.isolation_reports.record(run.namespace)
        if report is not None:
            await emit_event(context, run, action.type, action.reason, report)
    elif isinstance(action, engine_actions.EmitEvent):
        await emit_event(context, run, action.type, action.reason, action.message)
    else:  # a new action kind without a branch here fails the type check
        assert_never(action)


async def ensure_default_deny(context: ActionContext, namespace: str) -> None:
    """Before every step Job: the namespace's default-deny policy exists and says what it must.

    Read unless the watch-fed `context.default_deny` last saw it intact, so a policy
    somebody deleted is created again and one somebody edited (say, to allow all
    egress) is put back before the next step Job after the change is seen.
    """
    known = context.default_deny
    if known is not None and known.intact(namespace):
        return
    mark = known.asking(namespace) if known is not None else 0
    desired = build_default_deny_policy(namespace)
    path = NETWORK_POLICIES.path(namespace, desired["metadata"]["name"])
    existing = await context.api.get(path)
    if existing is None:
        body, _ = await context.api.create(NETWORK_POLICIES.path(namespace), desired)
    elif existing.get("spec") != desired["spec"]:
        log.warning("NetworkPolicy %s/%s was changed; restoring its default-deny spec", namespace, DEFAULT_DENY_POLICY)
        desired["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        body = await context.api.replace(path, desired)
    else:
        body = existing
    if known is not None:
        known.answered(body, mark)


async def create_step_job(context: ActionContext, run: RunRef, action: engine_actions.CreateStepJob) -> None:
    await ensure_default_deny(context, run.namespace)
    ports = (sorted(set(action.step_type.spec.egress.ports)) if action.step_type is not None
             else context.catalog.connector_ports(action.action, action.inputs))
    if ports and not action.allow_hosts and action.step_type is None and context.catalog.is_code(action.action):
        # The engine refuses such a step before it starts; an empty allowlist means "any public host", which a
        # code step's own sockets would reach past the SSRF guard, so its ports stay closed whatever asked.
        log.warning("%s step %s lists no allowHosts: its ports %s stay closed", action.action, action.step_id, ports)
        ports = []
    rules = egress_rules(
        egress=list(action.egress),
        connector_ports=ports,
        allow_hosts=action.allow_hosts,
        allow_private_networks=action.allow_private_networks,
        cluster_cidrs=context.pod_settings.cluster_cidrs,
        never_open=never_open(context),
    )
    policy = build_shared_egress_policy(run, rules, action.allow_hosts)
    await context.egress_policies.ensure(context.api, policy)
    job = build_step_job(
        run,
        BuiltinAction(context.catalog) if action.step_type is None else StepTypeImage(action.step_type),
        job_name=action.job_name,
        step_id=action.step_id,
        attempt=action.attempt,
        action=action.action,
        inputs=action.inputs,
        credentials=action.credentials,
        idempotency_key=action.idempotency_key,
        timeout_seconds=action.timeout_seconds,
        allow_hosts=action.allow_hosts,
        allow_private_networks=action.allow_private_networks,
        settings=context.pod_settings,
        created_at=datetime.now(UTC),
        egress_group=policy["metadata"]["labels"][LABEL_EGRESS],
        resources=action.resources,
        pod_metadata=action.pod_metadata,
    )
    created = await create_or_adopt_job(context, run, job)
    if created:
        log.info("created Job %s for %s", action.job_name, action.action)
    else:
        log.info("adopted existing Job %s/%s", run.namespace, action.job_name)


def never_open(context: ActionContext) -> tuple[str, ...]:
    """What no step policy opens whatever the step asks: the isolation probe's address and the API server's."""
    return (*isolation_probe_network(context.pod_settings.isolation_probe), *context.api_server_networks())


async def create_or_adopt_job(context: ActionContext, run: RunRef, job: JSON) -> bool:
    """Create `job` and its pod, or adopt the one of that name a pass before a crash created; True if created now.

    A same-named Job the run does not control is refused: adopting it would let whoever made it supply
    the step's result (or the announcement).
    """
    existing, created = await context.api.create(JOBS.path(run.namespace), job)
    if not created and controller_uid(existing) != run.uid:
        raise ApiError(409, f"Job {job['metadata']['name']} exists but is not controlled by run {run.name}")
    if context.remember is not None:
        context.remember(existing)
    if managed_by_operator(existing):
        await start_step_pod(context.api, existing, datetime.now(UTC), context.remember)
    return created


async def create_notification_job(
    context: ActionContext, run: RunRef, action: engine_actions.CreateNotificationJob
) -> None:
    """The Job that announces one gate event, behind an egress policy of its own; a 409 adopts the first one."""
    await ensure_default_deny(context, run.namespace)
    rules = egress_rules(
        egress=[], connector_ports=context.catalog.connector_ports(action.action, action.inputs),
        allow_hosts=action.allow_hosts, cluster_cidrs=context.pod_settings.cluster_cidrs,
        never_open=never_open(context),
    )
    policy = build_step_egress_policy(
        run, name=action.job_name, step_id=action.step_id, rules=rules, allow_hosts=action.allow_hosts,
        pod_selector=notification_selector(run, action.step_id, action.event, action.index),
    )
    await context.api.create(NETWORK_POLICIES.path(run.namespace), policy)
    job = build_step_job(
        run, Notification(context.catalog, action.event, action.index), job_name=action.job_name,
        step_id=action.step_id, attempt=0, action=action.action, inputs=action.inputs,
        credentials=action.credentials, idempotency_key=action.idempotency_key, timeout_seconds=None,
        allow_hosts=action.allow_hosts, settings=context.pod_settings, created_at=datetime.now(UTC),
    )
    created = await create_or_adopt_job(context, run, job)
    log.info("%s notification Job %s (%s, %s)", "created" if created else "adopted existing", action.job_name,
             action.event, action.action)


async def create_approval(context: ActionContext, run: RunRef, action: engine_actions.CreateApproval) -> None:
    body = build_approval(run, action)
    existing, created = await context.api.create(APPROVALS.path(run.namespace), body)
    if not created and controller_uid(existing) != run.uid:
        # Only the operator may create Approvals (admission policy); anything else is tampering.
        raise ApiError(409, f"Approval {action.name} exists but is not owned by run {run.name}")
    if context.remember is not None:
        context.remember(existing)
    written = existing.get("status") or {}
    # Also for an Approval an older operator created without the one-line approvers.
    if not written.get("phase") or not written.get("approvers"):
        await set_approval_phase(
            context.api, run.namespace, action.name, written.get("phase") or "Pending",
            approvers=approvers_line(action.approvers),
        )


async def set_approval_phase(
    api: KubeApi, namespace: str, name: str, phase: str, *, decided_at: str | None = None,
    approvers: str | None = None,
) -> None:
    status: dict[str, Any] = {"phase": phase}
    if decided_at is not None:
        status["decidedAt"] = decided_at
    if approvers is not None:
        status["approvers"] = approvers
    try:
        await api.merge_patch(APPROVALS.path(namespace, name, "status"), {"status": status})
    except ApiError as error:
        if error.status != 404:
            raise


async def emit_event(context: ActionContext, run: RunRef, kind: str, reason: str, message: str) -> None:
    now = rfc3339(datetime.now(UTC), timespec="seconds")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{run.name}.", "namespace": run.namespace},
        "involvedObject": {
            "apiVersion": "towline.dev/v1alpha1",
            "kind": "WorkflowRun",
            "name": run.name,
            "namespace": run.namespace,
            "uid": run.uid,
        },
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": context.reporter},
        "reportingComponent": context.reporter,
        "reportingInstance": context.reporter,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await context.api.request("POST", EVENTS.path(run.namespace), body=event)
    except ApiError as error:  # an event is never worth failing a reconcile for
        log.warning("could not record event %s on %s: %s", reason, run.name, error)


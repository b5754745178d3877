"""kopf wiring: every handler is a one-liner that enqueues a key.

Where kopf keeps its bookkeeping: nowhere on our objects. Towline registers
only `@kopf.on.event` handlers, which have no progress or diff-base state, and
posting kopf's own events is off, so kopf never writes an annotation, a label
or a finalizer to a Workflow. The `Operator` lives in kopf's `memo`, which
kopf hands to every handler.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from towline.k8s.client import KubeApi
from towline.k8s.generatedclient import kept_out
from towline.metrics import export_operator_state
from towline.runtime.clock import SYSTEM_CLOCK, Clock
from towline.runtime.config import OperatorConfig
from towline.runtime.operator import Operator

with kept_out():  # kopf would load kubernetes-asyncio's generated client only because it is installed
    import kopf

log = logging.getLogger(__name__)


def operator_of(memo: kopf.Memo) -> Operator:
    operator = memo.get("operator")
    if not isinstance(operator, Operator):
        raise RuntimeError("the operator has not started; kopf calls the startup handler before any watch")
    return operator


def build_registry(
    config: OperatorConfig, kubeconfig: str | None = None, *, clock: Clock = SYSTEM_CLOCK,
    adjust: Callable[[kopf.OperatorSettings], None] | None = None,
) -> kopf.OperatorRegistry:
    """`clock` and `adjust` (changes to kopf's settings after Towline's) are for a harness that imports
    this; the shipped operator passes neither."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        _tune(settings, adjust, config.watch_namespaces)
        operator = Operator(config=config, connection=await KubeApi.connect(kubeconfig), clock=clock)
        memo["operator"] = operator
        export_operator_state(operator.run_summaries, lambda: operator.holds_any_shard)
        await operator.start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        if "operator" in memo:
            await operator_of(memo).stop()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return kopf.login_with_service_account(**kwargs)
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.event("towline.dev", "v1alpha1", "workflows", registry=registry)
    async def workflow_event(memo: kopf.Memo, **kwargs: Any) -> None:
        deleted = kwargs["event"].get("type") == "DELETED"
        operator_of(memo).saw_workflow((kwargs["namespace"], kwargs["name"]), deleted=deleted)

    @kopf.on.event("towline.dev", "v1alpha1", "steptypes", registry=registry)
    async def step_type_event(memo: kopf.Memo, **kwargs: Any) -> None:
        _saw_step_type(operator_of(memo), kwargs["event"], "StepType")

    @kopf.on.event("towline.dev", "v1alpha1", "clustersteptypes", registry=registry)
    async def cluster_step_type_event(memo: kopf.Memo, **kwargs: Any) -> None:
        _saw_step_type(operator_of(memo), kwargs["event"], "ClusterStepType")

    # WorkflowRuns, step Jobs, step pods, Approvals and the default-deny NetworkPolicies: the operator's own
    # watches (towline.runtime.runwatch, childwatch), several events per step that kopf's per-event pipeline made
    # costly, and an Approval's decision, which no pass saw once through kopf (childwatch says more).

    return registry


async def serve(registry: kopf.OperatorRegistry, *, namespaces: list[str] | None, liveness: str | None) -> None:
    """kopf's operator as `kopf.run` runs it (`kopf.spawn_tasks`, then `kopf.run_tasks`), with Towline's own answer
    to SIGTERM and SIGINT in place of kopf's.

    kopf hands the Operator's stop to its cleanup, which runs only once every other task of kopf's has ended: a
    SIGTERM landing while kopf was still starting its watches never reached it, and the Lease, not handed over,
    kept a replacement waiting for its expiry (a suite run: the replica stopped 260 ms after it took the Lease).
    Here the signal begins the Operator's stop at once (its passes end, then the Lease is handed over) and asks
    kopf to stop; kopf's cleanup then waits for that same stop."""
    memo = kopf.Memo()
    stop = asyncio.Event()
    existing = {task for task in asyncio.all_tasks() if not task.done()}
    tasks = await kopf.spawn_tasks(registry=registry, memo=memo, stop_flag=stop, standalone=True,
                                   liveness_endpoint=liveness, **_scope(namespaces))

    def on_signal(received: signal.Signals) -> None:
        log.info("%s received: ending the passes, then handing the Lease over", received.name)
        operator = memo.get("operator")
        if isinstance(operator, Operator):
            operator.begin_stop()
        stop.set()

    loop = asyncio.get_running_loop()
    for received in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(received, on_signal, received)  # replaces kopf's (set as it spawned its tasks)
    await kopf.run_tasks(tasks, ignored=existing)


def _scope(namespaces: list[str] | None) -> dict[str, Any]:
    return {"namespaces": namespaces} if namespaces else {"clusterwide": True}


_PATTERN_CHARACTERS = frozenset("!*?,")
"""What makes a watched namespace a pattern in kopf's syntax (globs, negations, lists) rather than a name."""


def names_only(watch_namespaces: tuple[str, ...]) -> bool:
    """Whether the operator watches namespaces named outright (the chart's `watchNamespaces`), no pattern.

    Then kopf need not discover namespaces, and it must not try: to match patterns it lists and watches every
    namespace, which the chart's scoped RBAC rightly forbids, and it retried that listing through its whole
    budget (1+1+2+...+21 s) before it fell back to the names given: the operator acted on nothing for a
    minute after every start. Not scanning also means kopf discovers the CRDs once, at start (the chart
    installs them before the operator)."""
    return bool(watch_namespaces) and not any(_PATTERN_CHARACTERS & set(name) for name in watch_namespaces)


class RetriedForever:
    """kopf's backoffs between the attempts of one request, then the last of them for as long as it takes.

    After its backoffs kopf gives a request up and raises its last error. A watch's lost connection it catches
    and starts again, but an answer of 5xx or 403 (an API server that is starting, or that lost etcd) it lets
    through, and the watcher of that kind ends for good: the operator saw no Workflow made after an API server
    outage (`test_operator_api_outage.py`, twice in suite runs). client-go's reflectors retry for as long as it
    takes, and so does kopf now. Iterable again for every request (kopf iterates it once per request)."""

    def __init__(self, backoffs: float | Iterable[float]) -> None:
        self.backoffs = tuple(backoffs) if isinstance(backoffs, Iterable) else (backoffs,)

    def __iter__(self) -> Iterator[float]:
        return itertools.chain(self.backoffs, itertools.repeat(self.backoffs[-1]))


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """An empty diff base: kopf builds one on every event (a deep copy of the whole body) for on.create and
    on.update handlers, and Towline registers none (only on.event). Those copies were most of the operator's
    CPU under load (docs/benchmarks.md). Nothing is stored: kopf stores a diff base only for those handlers."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> Any:
        return {}


def _tune(settings: kopf.OperatorSettings, adjust: Callable[[kopf.OperatorSettings], None] | None,
          watch_namespaces: tuple[str, ...] = ()) -> None:
    settings.posting.enabled = False
    settings.scanning.disabled = names_only(watch_namespaces)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = 300
    # Memory: list in pages as client-go's reflector does, and let kopf's per-object workers (each holding
    # its object's last body) end half a second after their last event, so a start over thousands of
    # finished runs never holds them all at once.
    settings.watching.chunk_size = 500
    settings.queueing.idle_timeout = 0.5
    if adjust is not None:
        adjust(settings)
    settings.networking.error_backoffs = RetriedForever(settings.networking.error_backoffs)


def _saw_step_type(operator: Operator, event: Any, kind: str) -> None:
    body = (event or {}).get("object")
    if isinstance(body, dict):  # the watch's own dict, with its kind (kopf's body is a read-only view)
        operator.saw_step_type({**body, "kind": kind}, deleted=event.get("type") == "DELETED")

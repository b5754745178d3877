"""reconcile_step_type through its StepTypeDeps (a client, the image check, a requeue and a clock): whether
workflows can use a StepType or ClusterStepType, said in its status."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from handler_fakes import NAMESPACE, MemoryApi, resource_of

from towline.handlers.context import StepTypeDeps
from towline.handlers.steptypes import reconcile_step_type
from towline.k8s.client import CLUSTER_STEP_TYPES, STEP_TYPES
from towline.validation.steptypes import StepImagePolicy, check_step_type

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
POLICY = StepImagePolicy(allowed_prefixes=("localhost/towline-steps/",))


def step_type(name: str, image: str, kind: str = "StepType") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": NAMESPACE} if kind == "StepType" else {})}
    return {"apiVersion": "towline.dev/v1alpha1", "kind": kind, "metadata": meta,
            "spec": {"image": image, "inputs": {"type": "object"}}}


class Process:
    """The StepTypeDeps a reconcile gets, over an in-memory API server; records the requeues it asks for."""

    def __init__(self) -> None:
        self.api = MemoryApi()
        self.requeued: list[tuple[str, str]] = []

    def deps(self) -> StepTypeDeps:
        return StepTypeDeps(api=self.api, check_step_type=lambda body: check_step_type(body, POLICY),
                            requeue=self.requeued.append, now=lambda: NOW)

    def create(self, body: dict[str, Any]) -> None:
        resource = STEP_TYPES if body["kind"] == "StepType" else CLUSTER_STEP_TYPES
        asyncio.run(self.api.create(resource.path(body["metadata"].get("namespace")), body))

    def ready(self, namespace: str, name: str) -> dict[str, Any]:
        resource = STEP_TYPES if namespace else CLUSTER_STEP_TYPES
        stored = asyncio.run(self.api.get(resource.path(namespace or None, name)))
        assert stored is not None
        [ready] = [c for c in (stored.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
        return dict(ready)


def test_a_type_whose_image_the_policy_allows_is_ready_for_its_generation_at_the_given_time() -> None:
    process = Process()
    process.create(step_type("probe", "localhost/towline-steps/tcp-probe:dev"))
    asyncio.run(reconcile_step_type(process.deps(), NAMESPACE, "probe"))
    ready = process.ready(NAMESPACE, "probe")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Usable", 1)
    assert ready["lastTransitionTime"] == "2026-12-01T10:00:00Z", "the deps' clock, not the machine's"
    assert process.requeued == []


def test_a_cluster_type_with_an_image_outside_the_policy_is_not_ready_naming_the_field() -> None:
    process = Process()
    process.create(step_type("scan", "docker.io/somebody/scan:latest", kind="ClusterStepType"))
    asyncio.run(reconcile_step_type(process.deps(), "", "scan"))
    ready = process.ready("", "scan")
    assert (ready["status"], ready["reason"]) == ("False", "Unusable")
    assert "spec.image" in ready["message"]


def test_a_status_write_that_conflicts_asks_for_another_look() -> None:
    process = Process()
    process.create(step_type("probe", "localhost/towline-steps/tcp-probe:dev"))
    path = STEP_TYPES.path(NAMESPACE, "probe")
    read = process.api.get

    async def stale_read(requested: str) -> dict[str, Any] | None:
        body = await read(requested)
        # Somebody else writes between the pass's read and its status write.
        await process.api.merge_patch(path, {"metadata": {"labels": {"team": "a"}}})
        return body

    process.api.get = stale_read  # type: ignore[method-assign]
    asyncio.run(reconcile_step_type(process.deps(), NAMESPACE, "probe"))
    assert process.requeued == [(NAMESPACE, "probe")]
    stored = process.api.stored(resource_of(path), NAMESPACE, "probe")
    assert stored is not None and "status" not in stored, "nothing written over the other writer's change"


def test_a_type_that_is_gone_is_left_alone() -> None:
    process = Process()
    asyncio.run(reconcile_step_type(process.deps(), NAMESPACE, "gone"))
    assert [method for method, _ in process.api.requests] == ["GET"]
    assert process.requeued == []

"""A pass creates its step Jobs side by side (bounded), keeps other actions in order, and records Events last."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import REGISTRY

from towline.engine.actions import Action, CreateStepJob, DeleteJob, EmitEvent
from towline.engine.steps import EGRESS_ISOLATION_MISSING
from towline.k8s.actions import PARALLEL_CREATES, ActionContext, DefaultDenyPolicies, apply_actions
from towline.k8s.client import ApiError
from towline.k8s.egresspolicies import KEEP_SECONDS
from towline.k8s.objects import RunRef, StepPodSettings, build_default_deny_policy
from towline.validation.catalog import ConnectorCatalog

RUN = RunRef(name="fan", namespace="team", uid="uid-1", workflow="fan")


class SlowApi:
    """Every call takes a moment; records calls in order and how many creates were in flight at once."""

    def __init__(self, refuse_job: str | None = None) -> None:
        self.calls: list[str] = []
        self.bodies: dict[str, dict[str, Any]] = {}
        self.in_flight = 0
        self.most_in_flight = 0
        self.refuse_job = refuse_job

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        name = body["metadata"]["name"]
        if body["kind"] == "Job" and name == self.refuse_job:
            raise ApiError(403, f"jobs {name} is forbidden")
        self.calls.append(f"create {body['kind']} {name}")
        self.bodies[f"{body['kind']} {name}"] = body
        owners = body["metadata"]["ownerReferences"] if body["kind"] == "Pod" else [RUN.owner_reference()]
        return {**body, "metadata": {**body["metadata"], "uid": "job-uid", "ownerReferences": owners}}, True

    async def delete(self, path: str, **_: Any) -> bool:
        self.calls.append(f"delete {path.rsplit('/', 1)[-1]}")
        return True

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        if method == "PATCH":  # a step pod's finalizer, removed before its Job is deleted
            self.calls.append(f"release {path.rsplit('/', 1)[-1]}")
            return {}
        self.calls.append(f"event {body['reason']}")
        return {}


def job(index: int, *, egress: tuple[dict[str, Any], ...] = ()) -> CreateStepJob:
    return CreateStepJob(
        step_id=f"m{index}", attempt=1, job_name=f"fan-m{index}-1", action="data.transform", inputs={},
        credentials={}, egress=egress, allow_private_networks=(), allow_hosts=(), timeout_seconds=None,
        idempotency_key=f"k{index}", mutating=False,
    )


def apply(api: SlowApi, actions: list[Action], context: ActionContext | None = None) -> None:
    asyncio.run(apply_actions(context or make_context(api), RUN, actions))


class Port443Catalog(ConnectorCatalog):
    """Every action reaches its destinations on 443, so each step has an egress policy to make."""

    def connector_ports(self, action: str, inputs: Mapping[str, Any]) -> list[int]:
        return [443]


def make_context(api: SlowApi) -> ActionContext:
    known = DefaultDenyPolicies()
    intact = build_default_deny_policy(RUN.namespace)
    intact["metadata"]["resourceVersion"] = "1"
    known.saw(intact)
    return ActionContext(api=api, pod_settings=StepPodSettings(),  # type: ignore[arg-type]
                         catalog=Port443Catalog(), default_deny=known)


def policies(api: SlowApi) -> list[str]:
    return [call.removeprefix("create NetworkPolicy ") for call in api.calls if call.startswith("create Network")]


def test_a_fan_out_creates_its_jobs_side_by_side_within_the_bound() -> None:
    api = SlowApi()
    apply(api, [job(i) for i in range(3 * PARALLEL_CREATES)])
    assert 1 < api.most_in_flight <= PARALLEL_CREATES
    assert sorted(c for c in api.calls if c.startswith("create Job")) == sorted(
        f"create Job fan-m{i}-1" for i in range(3 * PARALLEL_CREATES))


def test_the_steps_of_one_egress_share_one_policy_made_before_their_jobs() -> None:
    api = SlowApi()
    elsewhere = ({"cidr": "198.51.100.0/24", "ports": [8443]},)
    apply(api, [job(0), job(1), job(2, egress=elsewhere), job(3)])
    assert len(policies(api)) == 2, api.calls
    for i in range(4):
        template = api.bodies[f"Job fan-m{i}-1"]["spec"]["template"]["metadata"]["labels"]
        selects = {name: api.bodies[f"NetworkPolicy {name}"]["spec"]["podSelector"]["matchLabels"]
                   for name in policies(api)}
        [policy] = [name for name, labels in selects.items() if labels.items() <= template.items()]
        assert api.calls.index(f"create NetworkPolicy {policy}") < api.calls.index(f"create Job fan-m{i}-1")
        opens = api.bodies[f"NetworkPolicy {policy}"]["spec"]["egress"]
        assert any(rule.get("ports") == [{"protocol": "TCP", "port": 8443}] for rule in opens) == (i == 2), \
            "each pod is selected by the policy of its own step's egress, and only by it"


def test_a_later_pass_makes_no_policy_the_operator_made_lately_and_a_failed_create_is_tried_again() -> None:
    api = SlowApi()
    context = make_context(api)
    apply(api, [job(0)], context)
    apply(api, [job(1)], context)
    assert len(policies(api)) == 1, "the second pass's step found the policy the first one made"
    context.egress_policies.clock = lambda: time.monotonic() + KEEP_SECONDS + 1
    apply(api, [job(2)], context)
    assert len(policies(api)) == 2, "after KEEP_SECONDS a step asks again (a 409 adopts the policy)"

    class Refusing(SlowApi):
        async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
            if body["kind"] == "NetworkPolicy" and not self.calls:
                self.calls.append("refused")
                raise ApiError(500, "etcdserver: request timed out")
            return await super().create(path, body)

    refusing = Refusing()
    context = make_context(refusing)
    with pytest.raises(ApiError, match="timed out"):
        apply(refusing, [job(0)], context)
    assert "create Job fan-m0-1" not in refusing.calls, "no pod without its egress policy"
    apply(refusing, [job(0)], context)
    assert len(policies(refusing)) == 1 and "create Job fan-m0-1" in refusing.calls


def test_events_come_last_and_other_actions_keep_their_order() -> None:
    api = SlowApi()
    apply(api, [EmitEvent("Normal", "RunStarted", "run started"), DeleteJob(job_name="old-1"), job(0),
                DeleteJob(job_name="old-2")])
    assert api.calls == ["release old-1", "delete old-1", f"create NetworkPolicy {policies(api)[0]}",
                         "create Job fan-m0-1", "create Pod fan-m0-1", "release old-2", "delete old-2",
                         "event RunStarted"]


def test_a_refused_job_fails_the_pass_after_the_others_were_created() -> None:
    api = SlowApi(refuse_job="fan-m1-1")
    with pytest.raises(ApiError, match="forbidden"):
        apply(api, [job(i) for i in range(3)])
    assert {"create Job fan-m0-1", "create Job fan-m2-1"} <= set(api.calls)


def test_every_attempt_without_egress_isolation_is_counted_though_events_are_rationed() -> None:
    def counted() -> float:
        return REGISTRY.get_sample_value("towline_egress_isolation_missing_total", {"namespace": RUN.namespace}) or 0

    before, api = counted(), SlowApi()
    apply(api, [EmitEvent("Warning", EGRESS_ISOLATION_MISSING, "step m0 attempt 1: not isolated")
                for _ in range(4)])
    assert counted() == before + 4
    # One Event once three failed within the window (k8s/isolationreports.py), however many counted.
    assert api.calls == [f"event {EGRESS_ISOLATION_MISSING}"]


class ExistingJobApi(SlowApi):
    """The Job already exists (a pass before a crash made it, or somebody else did), controlled by `owner_uid`."""

    def __init__(self, owner_uid: str) -> None:
        super().__init__()
        self.owner_uid = owner_uid

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if body["kind"] != "Job":
            return await super().create(path, body)
        owner = {**RUN.owner_reference(), "uid": self.owner_uid}
        return {**body, "metadata": {**body["metadata"], "uid": "job-uid", "ownerReferences": [owner]}}, False


def test_a_job_the_run_controls_is_adopted_and_an_impostor_is_refused() -> None:
    apply(ExistingJobApi(owner_uid=RUN.uid), [job(0)])  # adopted: no error
    with pytest.raises(ApiError, match="fan-m0-1 exists but is not controlled by run fan"):
        apply(ExistingJobApi(owner_uid="someone-elses-run"), [job(0)])

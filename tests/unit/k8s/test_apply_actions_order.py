"""A pass creates its step Jobs side by side (bounded), keeps other actions in order, and records Events last."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from towline.engine.actions import Action, CreateStepJob, DeleteJob, EmitEvent
from towline.engine.steps import EGRESS_ISOLATION_MISSING
from towline.k8s.actions import PARALLEL_CREATES, ActionContext, DefaultDenyPolicies, apply_actions
from towline.k8s.client import ApiError
from towline.k8s.objects import RunRef, StepPodSettings, build_default_deny_policy

RUN = RunRef(name="fan", namespace="team", uid="uid-1", workflow="fan")


class SlowApi:
    """Every call takes a moment; records calls in order and how many creates were in flight at once."""

    def __init__(self, refuse_job: str | None = None) -> None:
        self.calls: list[str] = []
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


def job(index: int) -> CreateStepJob:
    return CreateStepJob(
        step_id=f"m{index}", attempt=1, job_name=f"fan-m{index}-1", action="data.transform", inputs={},
        credentials={}, egress=(), allow_private_networks=(), allow_hosts=(), timeout_seconds=None,
        idempotency_key=f"k{index}", mutating=False,
    )


def apply(api: SlowApi, actions: list[Action]) -> None:
    known = DefaultDenyPolicies()
    intact = build_default_deny_policy(RUN.namespace)
    intact["metadata"]["resourceVersion"] = "1"
    known.saw(intact)
    context = ActionContext(api=api, pod_settings=StepPodSettings(),  # type: ignore[arg-type]
                            connector_ports=lambda *_: [443], default_deny=known)
    asyncio.run(apply_actions(context, RUN, actions))


def test_a_fan_out_creates_its_jobs_side_by_side_within_the_bound() -> None:
    api = SlowApi()
    apply(api, [job(i) for i in range(3 * PARALLEL_CREATES)])
    assert 1 < api.most_in_flight <= PARALLEL_CREATES
    assert sorted(c for c in api.calls if c.startswith("create Job")) == sorted(
        f"create Job fan-m{i}-1" for i in range(3 * PARALLEL_CREATES))


def test_each_jobs_egress_policy_is_created_before_the_job() -> None:
    api = SlowApi()
    apply(api, [job(i) for i in range(4)])
    for i in range(4):
        assert api.calls.index(f"create NetworkPolicy fan-m{i}-1") < api.calls.index(f"create Job fan-m{i}-1")


def test_events_come_last_and_other_actions_keep_their_order() -> None:
    api = SlowApi()
    apply(api, [EmitEvent("Normal", "RunStarted", "run started"), DeleteJob(job_name="old-1"), job(0),
                DeleteJob(job_name="old-2")])
    assert api.calls == ["release old-1", "delete old-1", "create NetworkPolicy fan-m0-1", "create Job fan-m0-1",
                         "create Pod fan-m0-1", "release old-2", "delete old-2", "event RunStarted"]


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

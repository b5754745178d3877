"""The raw-client limit: the least a controller must write per step, done as directly as possible.

Per step it creates the same Job the operator would (towline.k8s.stepjobs.build_step_job, labelled for its
run's shared egress policy as towline.k8s.actions.create_step_job labels it),
writes its start and creates its pod as the operator does (towline.k8s.steppods),
waits for the pod to succeed (seen on a watch), writes the Job's end and
merge-patches the run's status with the step's phase; steps of a level start
together. It authenticates
as the operator's ServiceAccount, so RBAC and admission are those the operator
meets. No observation, no engine, no NetworkPolicy, no Events: its throughput is
what this machine's API server, scheduler and simulated node
allow for the same runs, and Towline's throughput is reported as a ratio of it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tests.bench.scaleload import Observations, Shape, step_inputs
from towline.engine import naming
from towline.jsontypes import JSON
from towline.k8s.client import JOBS, WORKFLOW_RUNS, KubeApi
from towline.k8s.egresspolicies import egress_group
from towline.k8s.objects import RunRef, StepPodSettings, egress_rules
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.k8s.steppods import ended_status, start_step_pod
from towline.validation.catalog import connector_catalog

ACTION = "data.transform"


async def drive_run(api: KubeApi, shape: Shape, run: JSON, seen: Observations, settings: StepPodSettings) -> None:
    catalog = connector_catalog()  # the operator's own (towline.runtime.operator)
    meta = run["metadata"]
    ref = RunRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"], workflow=shape.name)
    rules = egress_rules(egress=[], connector_ports=catalog.connector_ports(ACTION, {}),
                         cluster_cidrs=settings.cluster_cidrs)
    group = egress_group(ref, rules, ())
    steps: dict[str, JSON] = {}
    status_path = WORKFLOW_RUNS.path(ref.namespace, ref.name, "status")

    async def step(step_id: str, last: bool) -> None:
        job_name = naming.job_name(ref.name, step_id, 1)  # the operator's own: admission allows no other
        job = build_step_job(
            ref, BuiltinAction(catalog), job_name=job_name, step_id=step_id, attempt=1, action=ACTION,
            inputs=step_inputs(step_id), credentials={}, idempotency_key=f"{ref.uid}-{step_id}-1",
            timeout_seconds=None, settings=settings, created_at=datetime.now(UTC), egress_group=group,
        )
        created, _ = await api.create(JOBS.path(ref.namespace), job)
        await start_step_pod(api, created, datetime.now(UTC))
        await seen.completion(ref.name, step_id)
        await api.merge_patch(JOBS.path(ref.namespace, job_name, "status"),
                              ended_status(created, {"status": {"phase": "Succeeded"}}, datetime.now(UTC)))
        steps[step_id] = {"id": step_id, "phase": "Succeeded", "attempt": 1, "jobName": job_name}
        phase = "Succeeded" if last and len(steps) == shape.steps else "Running"
        await api.merge_patch(status_path, {"status": {"phase": phase, "steps": list(steps.values())}})

    for index, level in enumerate(shape.levels):
        last = index == len(shape.levels) - 1
        await asyncio.gather(*(step(step_id, last) for step_id in level))


async def drive_runs(api: KubeApi, shape: Shape, runs: dict[str, JSON], seen: Observations) -> None:
    settings = StepPodSettings()
    await asyncio.gather(*(drive_run(api, shape, run, seen, settings) for run in runs.values()))

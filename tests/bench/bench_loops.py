"""A 1,000-item loop: the run object's size, and the operator's `decide` CPU per instance beside a plain step's.

Both workflows are driven to the end by the operator's own decision function, as the operator drives them
(every pass sees the Jobs the last one created, the finished ones with a result and the image the kubelet
reported): `loop`, one step with `forEach` over 1,000 items (`maxParallel` 100), and `plain`, 1,000 plain
steps with no needs (the same 100 at once, by `policy.parallelism`). Each pass's status is serialised as
the operator writes it (`to_wire`, compact JSON). Printed: the run object's largest and final size (its
status, with the run's spec and metadata as `kubectl towline run` makes them), and CPU seconds (process
time) of `decide` plus the status serialisation, per instance or step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from towline.api.run import WorkflowRunSpec, WorkflowRunStatus
from towline.api.workflow import RetryPolicy, WorkflowSpec
from towline.engine import CreateStepJob, JobObservation, Observed, RunView, StepResult, decide, start_run

T0 = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)
ITEMS = 1000
PARALLEL = 100
IMAGE = "localhost/towline-runner@sha256:" + "0" * 64
"""What the kubelet reports as a step container's imageID (an attempt's record keeps it)."""
RUN_SPEC = {"workflowRef": {"name": "rollout"}, "requestedBy": "carol", "trigger": {"type": "manual"}}
METADATA = {"name": "rollout-x7k2p", "namespace": "team-a", "uid": "0b3c2f1e-1d1c-4a5e-9c1f-5f0d7a2b9e11",
            "creationTimestamp": "2026-12-06T08:00:00Z", "generation": 1, "resourceVersion": "123456"}


class _Catalog:
    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        return False

    def default_retry(self, action: str) -> RetryPolicy | None:
        return RetryPolicy(limit=3)

    def is_code(self, action: str) -> bool:
        return False

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        return ["deploy.example.com"]


STEP = {"action": "http.request", "with": {"method": "POST", "url": "https://deploy.example.com/api/deployments",
                                             "json": {"cluster": "${{ item }}", "wave": "${{ index }}"}}}


def loop_workflow() -> WorkflowSpec:
    items = [f"cluster-{n:04d}" for n in range(ITEMS)]
    return WorkflowSpec.model_validate({
        "steps": [{"id": "deploy", **STEP, "forEach": {"items": items, "maxParallel": PARALLEL}}],
        "policy": {"parallelism": PARALLEL},
    })


def plain_workflow() -> WorkflowSpec:
    with_ = {"method": "POST", "url": "https://deploy.example.com/api/deployments", "json": {"cluster": "c"}}
    return WorkflowSpec.model_validate({
        "steps": [{"id": f"deploy_{n:04d}", "action": "http.request", "with": with_} for n in range(ITEMS)],
        "policy": {"parallelism": PARALLEL},
    })


def run_object_bytes(status: WorkflowRunStatus) -> int:
    return len(json.dumps({"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", "metadata": METADATA,
                           "spec": RUN_SPEC, "status": status.to_wire()}, separators=(",", ":")))


def drive(spec: WorkflowSpec) -> tuple[int, int, float, int]:
    """(largest run object, final run object, CPU seconds of decide and serialisation, passes)."""
    run_spec = WorkflowRunSpec.model_validate(RUN_SPEC)
    started = start_run(spec, 1, run_spec)
    assert not isinstance(started, list), started
    snapshot, params = started
    status = WorkflowRunStatus(workflow_spec=snapshot, params=params)
    catalog = _Catalog()
    jobs: dict[tuple[str, int], JobObservation] = {}
    now, cpu, largest, passes = T0, 0.0, 0, 0
    while status.phase not in ("Succeeded", "Failed", "Cancelled"):
        view = RunView(name=METADATA["name"], namespace="team-a", uid=METADATA["uid"], workflow_name="rollout",
                       spec=run_spec, status=status)
        begin = time.process_time()
        decision = decide(view, Observed(jobs=dict(jobs)), now, catalog)
        size = run_object_bytes(decision.status)
        cpu += time.process_time() - begin
        largest, passes, status = max(largest, size), passes + 1, decision.status
        for action in decision.actions:
            if isinstance(action, CreateStepJob):
                jobs[(action.step_id, action.attempt)] = JobObservation(
                    action.step_id, action.attempt, action.job_name, "active", started_at=now)
        now += timedelta(seconds=5)
        for key, job in list(jobs.items()):
            if job.state == "active":
                jobs[key] = replace(job, state="succeeded", finished_at=now, image=IMAGE,
                                    result=StepResult(ok=True, output={"revision": f"r-{key[1]}", "ok": True}))
    assert status.phase == "Succeeded", status.message
    return largest, run_object_bytes(status), cpu, passes


def main() -> None:
    for name, spec in (("loop (forEach, 1,000 items)", loop_workflow()), ("plain (1,000 steps)", plain_workflow())):
        largest, final, cpu, passes = drive(spec)
        print(f"{name}: run object largest {largest / 1024:.0f} KiB, final {final / 1024:.0f} KiB; "
              f"decide + status serialisation {cpu * 1000 / ITEMS:.2f} ms CPU per instance or step "
              f"({cpu:.1f} s over {passes} passes)")


if __name__ == "__main__":
    main()

"""Cost of one `decide` call on a 1,000-step and a 10-step DAG (target: under 5 ms at 1,000 steps).

Three moments of a run are measured, each on the same inputs many times:
- start: the first reconcile of a fresh run (every step listed, the roots started);
- mid-run: half the DAG done, a Job just finished, its dependants start;
- idle: a reconcile where nothing changed (a watch event for another field).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from towline.api.run import WorkflowRunSpec, WorkflowRunStatus
from towline.api.workflow import RetryPolicy, WorkflowSpec
from towline.engine import CreateStepJob, JobObservation, Observed, RunView, StepResult, decide, start_run

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


class _Catalog:
    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        return action == "crm.update"

    def default_retry(self, action: str) -> RetryPolicy | None:
        return RetryPolicy(limit=3)

    def is_code(self, action: str) -> bool:
        return action.startswith("code.")

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        return ["x.test"]


def dag_workflow(size: int, *, seed: int = 7) -> WorkflowSpec:
    """A layered DAG: each step needs 1-3 of the 20 steps before it; some have `when` and bindings."""
    rng = random.Random(seed)
    steps: list[dict[str, Any]] = []
    for index in range(size):
        step: dict[str, Any] = {"id": f"step_{index}", "action": "http.request", "with": {"url": "https://x.test/"}}
        if index:
            window = range(max(0, index - 20), index)
            step["needs"] = sorted({f"step_{rng.choice(window)}" for _ in range(rng.randint(1, 3))})
        if index % 10 == 5:
            need = step["needs"][0]
            step["when"] = f"steps.{need}.output.n >= 0"
            step["with"] = {"url": f"https://x.test/${{{{ steps.{need}.output.n }}}}", "q": "${{ params.q }}"}
        steps.append(step)
    return WorkflowSpec.model_validate({
        "params": [{"name": "q", "default": "x"}],
        "steps": steps,
        "policy": {"parallelism": 50},
    })


def _view(status: WorkflowRunStatus, spec: WorkflowRunSpec) -> RunView:
    return RunView(name="bench", namespace="ns", uid="uid-bench", workflow_name="bench", spec=spec, status=status)


Moment = tuple[RunView, Observed, datetime]


def _moments(size: int) -> dict[str, Moment]:
    """Run the DAG to its middle and keep the inputs of three representative decide calls."""
    spec = WorkflowRunSpec.model_validate({"workflowRef": {"name": "bench"}})
    started = start_run(dag_workflow(size), 1, spec)
    assert not isinstance(started, list), started
    snapshot, params = started
    status = WorkflowRunStatus(workflow_spec=snapshot, params=params)
    catalog = _Catalog()
    jobs: dict[tuple[str, int], JobObservation] = {}
    moments: dict[str, Moment] = {"start": (_view(status, spec), Observed(), T0)}
    now = T0
    finished = 0
    while finished < size // 2:
        decision = decide(_view(status, spec), Observed(jobs=dict(jobs)), now, catalog)
        status = decision.status
        for action in decision.actions:
            if isinstance(action, CreateStepJob):
                jobs[(action.step_id, action.attempt)] = JobObservation(
                    action.step_id, action.attempt, action.job_name, "active", started_at=now
                )
        moments["idle"] = (_view(status, spec), Observed(jobs=dict(jobs)), now)
        now += timedelta(seconds=1)
        for key, job in list(jobs.items()):
            if job.state == "active":
                result = StepResult(ok=True, output={"n": finished})
                jobs[key] = replace(job, state="succeeded", result=result, finished_at=now)
                finished += 1
                moments["mid-run"] = (_view(status, spec), Observed(jobs=dict(jobs)), now)
                break
    return moments


def median_ms(call: Callable[[], object], *, budget_seconds: float = 1.5, minimum: int = 20) -> tuple[float, int]:
    samples: list[float] = []
    deadline = time.perf_counter() + budget_seconds
    while len(samples) < minimum or time.perf_counter() < deadline:
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), len(samples)


def main() -> None:
    catalog = _Catalog()
    for size in (1000, 10):
        for moment, (view, observed, now) in _moments(size).items():
            median, count = median_ms(lambda v=view, o=observed, n=now: decide(v, o, n, catalog))
            print(f"decide {size}-step DAG, {moment}: median {median:.2f} ms (n={count})")


if __name__ == "__main__":
    main()

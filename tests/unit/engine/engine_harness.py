"""A simulated world for the engine: the operator loop, Jobs, Approvals and a clock.

`Sim.reconcile()` does what the operator does: observe, call `decide`, carry
out the actions against the simulated world, then persist the status (unless
the test simulates a crash between applying actions and writing status).
Tests then finish Jobs, decide Approvals and move the clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from towline.api.run import StepStatus, WorkflowRunSpec, WorkflowRunStatus
from towline.api.steptype import ResolvedStepType
from towline.api.workflow import RetryPolicy, WorkflowSpec
from towline.engine import (
    Action,
    ApprovalObservation,
    CloseApproval,
    CreateApproval,
    CreateStepJob,
    Decision,
    DeleteJob,
    EmitEvent,
    JobObservation,
    Observed,
    RunView,
    StepResult,
    decide,
    start_run,
)
from towline_connectors.spec import url_destination

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
WORKFLOW_UID = "workflow-uid-1"
MUTATING_ACTIONS = frozenset({"crm.update", "tasks.create"})


class FakeCatalog:
    """crm.update and tasks.create mutate; http.request mutates unless its method is GET."""

    def __init__(self, retries: Mapping[str, RetryPolicy] | None = None) -> None:
        self.retries = dict(retries or {})

    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        if action == "http.request":
            return str(inputs.get("method", "GET")).upper() != "GET"
        return action in MUTATING_ACTIONS

    def default_retry(self, action: str) -> RetryPolicy | None:
        return self.retries.get(action)

    def is_code(self, action: str) -> bool:
        return action.startswith("code.")

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """The host of `with.url` as written (None when templated); notify.slack always posts to Slack."""
        if action == "notify.slack":
            return ["hooks.slack.com"]
        return [d.host for d in url_destination(inputs["url"])] if "url" in inputs else []


def workflow(steps: list[dict[str, Any]], **extra: Any) -> WorkflowSpec:
    """A WorkflowSpec from wire-form dicts: `workflow([{"id": "a", "action": "http.request"}], finally=[...])`."""
    return WorkflowSpec.model_validate({"steps": steps, **extra})


def action(step_id: str, *needs: str, **extra: Any) -> dict[str, Any]:
    """A read-only http.request step (wire form)."""
    return {"id": step_id, "action": "http.request", "needs": list(needs), **extra}


@dataclass
class Sim:
    """One run, the world around it, and the operator loop that connects them."""

    spec: WorkflowSpec
    params: dict[str, Any] = field(default_factory=dict)
    catalog: Any = field(default_factory=FakeCatalog)
    """An engine ActionCatalog: FakeCatalog, or a StepTypeCatalog for runs of user step types."""
    name: str = "renewal-watch-1"
    uid: str = "uid-1"
    now: datetime = T0
    requested_by: str | None = "alice"
    step_types: Mapping[str, ResolvedStepType | str] = field(default_factory=dict)
    """What the operator would resolve `steptype/...` actions to when the run starts."""

    def __post_init__(self) -> None:
        self.run_spec = WorkflowRunSpec.model_validate(
            {"workflowRef": {"name": "renewal-watch"}, "params": self.params, "requestedBy": self.requested_by}
        )
        started = start_run(self.spec, 1, self.run_spec, workflow_uid=WORKFLOW_UID, step_types=self.step_types)
        assert not isinstance(started, list), started
        snapshot, params = started
        self.status = WorkflowRunStatus(workflow_spec=snapshot, params=params)
        self.web_view_url: str | None = None
        """The web view's origin decide() links approval notifications to."""
        self.resume_token: str | None = None
        self.jobs: dict[tuple[str, int], JobObservation] = {}
        self.approvals: dict[str, ApprovalObservation] = {}
        self.created: list[CreateStepJob] = []
        self.requested: list[CreateApproval] = []
        self.actions: list[Action] = []
        self.last: Decision | None = None

    # --- the operator loop -------------------------------------------------------------

    def observed(self) -> Observed:
        return Observed(jobs=dict(self.jobs), approvals=dict(self.approvals))

    def view(self) -> RunView:
        return RunView(
            name=self.name, namespace="sales-ops", uid=self.uid, workflow_name="renewal-watch",
            spec=self.run_spec, status=self.status, resume_token=self.resume_token,
        )

    def reconcile(self, *, persist: bool = True) -> Decision:
        decision = decide(self.view(), self.observed(), self.now, self.catalog,
                          web_view_url=self.web_view_url)
        for item in decision.actions:
            self.apply(item)
        if persist:
            self.status = decision.status
        self.last = decision
        return decision

    def apply(self, item: Action) -> None:
        self.actions.append(item)
        if isinstance(item, CreateStepJob):
            self.created.append(item)
            key = (item.step_id, item.attempt)
            if key not in self.jobs:
                self.jobs[key] = JobObservation(
                    item.step_id, item.attempt, item.job_name, "active", started_at=self.now
                )
        elif isinstance(item, CreateApproval):
            self.requested.append(item)
            self.approvals.setdefault(
                item.step_id, ApprovalObservation(item.step_id, item.name, expires_at=item.expires_at)
            )
        elif isinstance(item, DeleteJob):
            self.jobs = {key: job for key, job in self.jobs.items() if job.job_name != item.job_name}

    # --- the world ---------------------------------------------------------------------

    def finish(
        self, step_id: str, *, ok: bool = True, output: Any = None, error_class: str | None = None,
        message: str | None = None, retryable: bool | None = None, retry_after: float | None = None,
        attempt: int | None = None, result: bool = True, reason: str | None = None,
    ) -> None:
        """Complete the step's latest Job with this result (or none: `result=False`)."""
        key = (step_id, attempt or max(a for s, a in self.jobs if s == step_id))
        job = self.jobs[key]
        outcome = StepResult(ok, output, error_class, message, retryable, retry_after) if result else None
        self.jobs[key] = replace(
            job, state="succeeded" if ok and result else "failed", result=outcome, finished_at=self.now, reason=reason,
        )

    def fail(self, step_id: str, error_class: str = "permanent", message: str = "it broke", **extra: Any) -> None:
        self.finish(step_id, ok=False, error_class=error_class, message=message, **extra)

    def vanish(self, step_id: str) -> None:
        self.jobs = {key: job for key, job in self.jobs.items() if key[0] != step_id}

    def decide_approval(self, step_id: str, decision: str, by: str = "bob", reason: str | None = None) -> None:
        current = self.approvals[step_id]
        self.approvals[step_id] = replace(current, decision=decision, decided_by=by, decided_at=self.now, reason=reason)

    def advance(self, seconds: float = 0, **delta: float) -> None:
        self.now += timedelta(seconds=seconds, **delta)

    def set_spec(self, **changes: Any) -> None:
        self.run_spec = self.run_spec.model_copy(update=changes)

    # --- reading the result ------------------------------------------------------------

    def step(self, step_id: str) -> StepStatus:
        """The step's status; a step not listed yet is Pending."""
        return next((entry for entry in self.status.steps if entry.id == step_id), StepStatus(id=step_id))

    def phase_of(self, step_id: str) -> str:
        return self.step(step_id).phase

    @property
    def phase(self) -> str:
        return self.status.phase

    def condition(self, kind: str) -> Any:
        return next((c for c in self.status.conditions if c.type == kind), None)

    def started(self) -> list[str]:
        """Step ids whose Job was created, in order."""
        return [job.step_id for job in self.created]

    def events(self, reason: str | None = None) -> list[EmitEvent]:
        return [a for a in self.actions if isinstance(a, EmitEvent) and (reason is None or a.reason == reason)]

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]

    def succeed_all(self, rounds: int = 50) -> None:
        """Reconcile, finish every active Job successfully, repeat until the run ends."""
        for _ in range(rounds):
            self.reconcile()
            if self.phase in ("Succeeded", "Failed", "Cancelled"):
                return
            for (step_id, attempt), job in list(self.jobs.items()):
                if job.state == "active":
                    self.finish(step_id, attempt=attempt)
            self.advance(1)
        raise AssertionError(f"run did not finish: {self.phase}")


__all__ = [
    "T0",
    "WORKFLOW_UID",
    "CloseApproval",
    "FakeCatalog",
    "Sim",
    "action",
    "workflow",
]

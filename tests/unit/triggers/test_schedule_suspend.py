"""A schedule trigger suspended by its annotation starts no run; its resume backfills nothing unless
startingDeadlineSeconds (the trigger's catch-up policy) covers the latest slot it missed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from test_cron_impostors import FakeRuns

from towline.api.schedulesuspend import suspend_annotation, suspended_triggers
from towline.api.workflow import ScheduleStatus, WorkflowSpec, WorkflowStatus
from towline.triggers.cron import fire_due_schedules

CREATED = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 12, 5, hour, minute, tzinfo=UTC)


def spec(**schedule: Any) -> WorkflowSpec:
    return WorkflowSpec.model_validate({
        "triggers": [{"name": "hourly", "schedule": {"cron": "0 * * * *", **schedule}},
                     {"name": "nightly", "schedule": {"cron": "30 * * * *"}}],
        "steps": [{"id": "a", "action": "http.request", "with": {"url": "https://example.com"}}],
    })


def workflow(*suspended: str) -> dict[str, Any]:
    annotations = {suspend_annotation(name): "true" for name in suspended}
    return {"metadata": {"name": "report", "namespace": "team", "uid": "wf-uid-1234567890",
                         "creationTimestamp": CREATED.strftime("%Y-%m-%dT%H:%M:%SZ"), "annotations": annotations}}


def fire(api: FakeRuns, body: dict[str, Any], the_spec: WorkflowSpec, status: WorkflowStatus, now: datetime) -> None:
    asyncio.run(fire_due_schedules(api, body, the_spec, status, now=now,  # type: ignore[arg-type]
                                   creator="system:serviceaccount:t:op", known_in_flight=[]))


def entry(status: WorkflowStatus, trigger: str) -> ScheduleStatus:
    return next(e for e in status.schedules if e.trigger == trigger)


def test_only_the_value_true_suspends() -> None:
    assert suspended_triggers({"suspend.towline.dev/a": "true", "suspend.towline.dev/b": "false",
                               "towline.dev/c": "true"}) == {"a"}


def test_a_suspended_trigger_starts_no_run_and_the_others_still_fire() -> None:
    api, status, the_spec = FakeRuns(), WorkflowStatus(), spec()
    fire(api, workflow("hourly"), the_spec, status, at(3, 1))
    fire(api, workflow("hourly"), the_spec, status, at(4, 31))
    assert api.created == ["report-nightly-202612050430"]
    assert entry(status, "hourly").suspended and entry(status, "hourly").next_schedule_time is None
    assert entry(status, "nightly").next_schedule_time == at(5, 30)


def test_resume_does_not_backfill_the_slot_missed_while_suspended() -> None:
    api, status, the_spec = FakeRuns(), WorkflowStatus(), spec()
    fire(api, workflow("hourly"), the_spec, status, at(3, 1))
    fire(api, workflow(), the_spec, status, at(5, 10))  # resumed after the 04:00 and 05:00 slots
    assert [name for name in api.created if "hourly" in name] == []
    assert not entry(status, "hourly").suspended and entry(status, "hourly").last_schedule_time == at(5)
    fire(api, workflow(), the_spec, status, at(6, 0))
    assert "report-hourly-202612050600" in api.created


def test_resume_runs_the_latest_missed_slot_within_the_starting_deadline() -> None:
    api, status, the_spec = FakeRuns(), WorkflowStatus(), spec(startingDeadlineSeconds=900)
    fire(api, workflow("hourly"), the_spec, status, at(3, 1))
    fire(api, workflow(), the_spec, status, at(5, 10))
    assert [name for name in api.created if "hourly" in name] == ["report-hourly-202612050500"]


def test_resume_after_the_starting_deadline_runs_nothing() -> None:
    api, status, the_spec = FakeRuns(), WorkflowStatus(), spec(startingDeadlineSeconds=300)
    fire(api, workflow("hourly"), the_spec, status, at(3, 1))
    fire(api, workflow(), the_spec, status, at(5, 10))
    assert [name for name in api.created if "hourly" in name] == []

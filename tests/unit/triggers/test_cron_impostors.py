"""A run found under a schedule slot's name counts as the slot's run only if the schedule made it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from towline.api.workflow import Trigger
from towline.triggers.cron import _start_run
from towline.triggers.schedule import scheduled_run_name

SLOT = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
WORKFLOW = {"metadata": {"name": "nightly-report", "namespace": "team", "uid": "wf-uid-1234567890"}}
TRIGGER = Trigger.model_validate({"name": "nightly", "schedule": {"cron": "0 2 * * *"}})


class FakeRuns:
    """Just enough of KubeApi for the schedule: runs by name, create answering 409 with what exists."""

    def __init__(self, *existing: dict[str, Any]) -> None:
        self.runs = {run["metadata"]["name"]: run for run in existing}
        self.created: list[str] = []

    async def create(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        name = body["metadata"]["name"]
        if name in self.runs:
            return self.runs[name], False
        self.runs[name] = body
        self.created.append(name)
        return body, True

    async def list(self, path: str, **_: Any) -> list[dict[str, Any]]:
        return list(self.runs.values())


def fire(api: FakeRuns) -> bool:
    in_flight = [name for name, run in api.runs.items() if not (run.get("status") or {}).get("phase")]
    return asyncio.run(_start_run(api, WORKFLOW, TRIGGER, SLOT,  # type: ignore[arg-type]
                                  creator="system:serviceaccount:t:op", known_in_flight=in_flight))


def impostor(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": scheduled_run_name("nightly-report", "nightly", SLOT)},
            "spec": {"workflowRef": {"name": "nightly-report"}, **spec}}


def test_the_slot_fires_under_its_own_name() -> None:
    api = FakeRuns()
    assert fire(api)
    assert api.created == ["nightly-report-nightly-202612010200"]


def test_a_manual_run_holding_the_slots_name_does_not_count_as_fired() -> None:
    api = FakeRuns(impostor(trigger={"type": "manual"}))
    assert fire(api)
    [created] = api.created
    run = api.runs[created]
    assert created.endswith("-202612010200") and created != "nightly-report-nightly-202612010200"
    assert run["spec"]["trigger"] == {"type": "schedule", "name": "nightly", "scheduledTime": "2026-12-01T02:00:00Z"}


def test_a_forged_schedule_run_without_the_workflow_as_owner_does_not_count() -> None:
    forged = impostor(trigger={"type": "schedule", "name": "nightly", "scheduledTime": "2026-12-01T02:00:00Z"})
    api = FakeRuns(forged)
    assert fire(api) and len(api.created) == 1


def test_the_schedules_own_run_is_adopted_after_a_restart() -> None:
    api = FakeRuns()
    fire(api)
    assert not fire(api), "the second create meets the first run and adopts it"
    assert len(api.created) == 1

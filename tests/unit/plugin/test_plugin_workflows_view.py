"""`kubectl towline workflows` and `workflows show NAME`: the table and the detail drawn from a Workflow as the API
server returns it, the command lines refused in one line, and completion."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from towline.plugin.cli import build_parser, main
from towline.plugin.completion import candidates
from towline.plugin.workflowviews import workflow_detail, workflows_table

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def workflow(name: str, *, ready: str | None = "True", generation: int = 2, observed: int = 2,
             **status: Any) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": ready, "reason": "Valid", "message": "valid and active"}] if ready else []
    return {
        "metadata": {"name": name, "namespace": "team", "generation": generation,
                     "creationTimestamp": "2026-12-04T12:00:00Z"},
        "spec": {"params": [{"name": "days", "type": "integer", "default": 90}, {"name": "env", "type": "string"}],
                 "triggers": [{"name": "weekdays", "schedule": {"cron": "0 8 * * 1-5", "timeZone": "Europe/Berlin",
                                                                 "concurrencyPolicy": "Forbid"}},
                              {"name": "crm_event", "webhook": {"verify": {"scheme": "standard-webhooks"}}}],
                 "steps": [{"id": "a", "action": "data.transform"}]},
        "status": {"observedGeneration": observed, "conditions": conditions, **status},
    }


def test_the_table_shows_ready_last_run_and_next_schedule() -> None:
    table = workflows_table([
        workflow("renewals", lastRun={"name": "renewals-x", "phase": "Succeeded"},
                 nextScheduleTime="2026-12-06T15:00:00Z"),
        workflow("broken", ready="False"),
        workflow("new", ready=None),
    ], NOW, all_namespaces=False).splitlines()
    assert table[0].split() == ["NAME", "READY", "SUSPENDED", "LAST", "RUN", "NEXT", "SCHEDULE", "AGE"]
    assert table[1].split() == ["broken", "False", "2d"]
    assert table[2].split() == ["new", "Unknown", "2d"]
    assert table[3].split() == ["renewals", "True", "renewals-x", "Succeeded", "in", "3h", "2d"]
    assert workflows_table([], NOW, all_namespaces=True) == "No workflows."
    assert workflows_table([workflow("a")], NOW, all_namespaces=True).splitlines()[1].split()[:2] == ["team", "a"]


def test_show_has_params_triggers_with_the_webhook_path_schedules_and_problems() -> None:
    text = workflow_detail(workflow(
        "renewals", generation=3, observed=2, lastRun={"name": "renewals-x", "phase": "Failed"},
        schedules=[{"trigger": "weekdays", "nextScheduleTime": "2026-12-07T07:00:00Z"}],
        validationErrors=[{"field": "spec.steps[0].with", "message": "fields is required"}]), NOW)
    assert "Ready True: valid and active (not yet for the latest change)" in text
    assert "  days: integer = 90" in text and "  env: string (required)" in text
    assert "  manual: kubectl towline run renewals (always allowed)" in text
    assert "  weekdays: schedule 0 8 * * 1-5 (Europe/Berlin, Forbid); next in 19h, last never" in text
    assert "  crm_event: webhook (standard-webhooks) POST /hooks/team/renewals/crm_event" in text
    assert "Last run: renewals-x Failed" in text
    assert "Problem: spec.steps[0].with: fields is required" in text


@pytest.mark.parametrize(("argv", "says"), [
    (["workflows", "show"], "workflows show needs NAME"),
    (["workflows", "nightly"], "argument show: invalid choice: 'nightly'"),
    (["workflows", "show", "nightly", "-A"], "use -n NAMESPACE, not -A"),
])
def test_a_bad_workflows_line_is_one_line_exit_2(argv: list[str], says: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_workflows_completes() -> None:
    assert candidates(build_parser(), ["work"]) == ["workflows"]
    assert candidates(build_parser(), ["workflows", "s"]) == ["show"]
    assert candidates(build_parser(), ["workflows", "--a"]) == ["--all-namespaces"]


def test_show_lists_a_cloud_event_trigger_with_its_types_and_path() -> None:
    shown = workflow("orders")
    shown["spec"]["triggers"].append({"name": "paid", "cloudEvent": {
        "verify": {"scheme": "bearer"}, "types": ["com.example.order.paid", "com.example.order.refunded"]}})
    text = workflow_detail(shown, NOW)
    assert ("  paid: cloudEvent (bearer) com.example.order.paid, com.example.order.refunded POST "
            "/hooks/team/orders/paid at the webhook ingress") in text

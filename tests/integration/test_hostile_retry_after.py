"""A remote server cannot break a run's reconcile with an absurd Retry-After (real node, real HTTP server).

The step calls a server that answers `429` with `Retry-After: 300000000000`. The
connector and the operator clamp it to the step protocol's maximum, so the run
waits a bounded time for its next attempt, and the operator goes on reconciling
every other run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.integration.support import (
    ScriptedServer,
    apply,
    get,
    start_run,
    wait_for,
    wait_for_phase,
)

from towline_connectors.wire import parse_rfc3339
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_step.protocol import MAX_RETRY_AFTER_SECONDS

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

PASS_SLACK = timedelta(minutes=5)
"""Between the attempt's end and the operator's pass that schedules the retry (seconds, in practice)."""


def http_workflow(namespace: str, name: str, url: str) -> dict[str, object]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"steps": [{"id": "call", "action": "http.request", "with": {"url": url},
                            "retry": {"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1}}]},
    }


def test_a_429_asking_for_300000000000_seconds_schedules_a_bounded_retry(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        limited = api.script("/limited", (429, {"error": "slow down"}, {"Retry-After": "300000000000"}))
        api.script("/ok", (200, {"fine": True}, {}))
        apply(cluster, http_workflow(ns, "limited", f"{api.url}/limited"))
        apply(cluster, http_workflow(ns, "healthy", f"{api.url}/ok"))
        start_run(cluster, ns, "limited", "limited-run")

        def retrying() -> dict[str, Any] | None:
            run = get(cluster, "workflowruns.towline.dev", "limited-run", ns) or {}
            steps = [s for s in (run.get("status") or {}).get("steps", []) if s["id"] == "call"]
            return steps[0] if steps and steps[0].get("phase") in ("Retrying", "Failed") else None

        step = wait_for("the rate-limited step to be rescheduled or failed", retrying, timeout=180)
        assert len(limited.requests) == 1, "the server was really called"
        assert step["phase"] == "Retrying", f"a one-day wait fits a run without a deadline: {step}"
        assert step["errorClass"] == "rate_limit"
        retry_at, ended = parse_rfc3339(step["retryAt"]), parse_rfc3339(step["history"][-1]["finishedAt"])
        maximum = timedelta(seconds=MAX_RETRY_AFTER_SECONDS)
        assert maximum <= retry_at - ended <= maximum + PASS_SLACK, (retry_at, ended)

        # The operator keeps reconciling: another run starts, calls the server and succeeds.
        start_run(cluster, ns, "healthy", "healthy-run")
        done = wait_for_phase(cluster, ns, "healthy-run", {"Succeeded", "Failed"}, timeout=180)
        assert done["status"]["phase"] == "Succeeded", done["status"]
    assert "OverflowError" not in towline_operator.log_text()

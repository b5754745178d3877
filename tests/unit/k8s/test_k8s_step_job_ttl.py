"""A step Job's ttlSecondsAfterFinished: the chart's value without the archive; none while the archive is on (the
archive sets it once the Job's pod's logs are in the record), and the archive's backlog limit read from the chart."""

from __future__ import annotations

from typing import Any

import pytest

from towline.k8s.objects import RunRef, StepPodSettings
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.runtime.config import OperatorConfig, archive_max_runs_awaiting
from towline.validation.catalog import connector_catalog

RUN = RunRef(name="r-1", namespace="team", uid="uid-1", workflow="wf")
ENV = {"TOWLINE_ISOLATION_PROBE": "10.96.0.1:443"}


def job(settings: StepPodSettings) -> dict[str, Any]:
    return build_step_job(
        RUN, BuiltinAction(connector_catalog()),
        job_name="towline-step-r-1-call-1", step_id="call", attempt=1, action="http.request",
        inputs={"url": "https://example.com"}, credentials={}, idempotency_key="k", timeout_seconds=60,
        settings=settings,
    )


def test_without_the_archive_a_step_job_gets_the_charts_ttl() -> None:
    settings = OperatorConfig.from_environment({**ENV, "TOWLINE_JOB_TTL_SECONDS": "3600"}).pod_settings
    assert job(settings)["spec"]["ttlSecondsAfterFinished"] == 3600


def test_with_the_archive_on_a_step_job_has_no_ttl() -> None:
    settings = OperatorConfig.from_environment({**ENV, "TOWLINE_JOB_TTL_SECONDS": "3600",
                                                "TOWLINE_ARCHIVE": "true"}).pod_settings
    assert settings.ttl_seconds_after_finished is None
    spec = job(settings)["spec"]
    assert "ttlSecondsAfterFinished" not in spec
    assert spec["backoffLimit"] == 0 and spec["managedBy"] == "towline.dev/operator"


def test_the_archives_backlog_limit_defaults_to_1000_and_0_means_none() -> None:
    assert OperatorConfig.from_environment(ENV).archive_max_runs_awaiting == 1000
    assert archive_max_runs_awaiting({"TOWLINE_ARCHIVE_MAX_RUNS_AWAITING": "0"}) == 0
    assert archive_max_runs_awaiting({"TOWLINE_ARCHIVE_MAX_RUNS_AWAITING": " 2 "}) == 2


@pytest.mark.parametrize("bad", ["-1", "many", "1.5"])
def test_a_bad_backlog_limit_names_the_chart_value(bad: str) -> None:
    with pytest.raises(ValueError, match=r"archive\.maxRunsAwaiting"):
        archive_max_runs_awaiting({"TOWLINE_ARCHIVE_MAX_RUNS_AWAITING": bad})

"""The simulated node's kwok Stages complete a step pod with the runner's own result document."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import yaml

from towline.k8s.observe import parse_result
from towline_connectors.redact import Redactor
from towline_connectors.result import StepResult, render_result
from towline_dev.simnode import (
    MANAGED_ANNOTATION,
    SUCCEEDED_RESULT,
    complete_owned_by,
    cri_log,
    fake_node,
    kwok_config_text,
    pod_stages,
    result_message,
)
from towline_step.protocol import RESULT_LIMIT_BYTES


def _complete_stage(message: str) -> dict[str, object]:
    (stage,) = [s for s in pod_stages(message) if s["metadata"]["name"] == "pod-complete"]
    return stage


def _message_line(template: str) -> str:
    (line,) = [line.strip() for line in template.splitlines() if line.strip().startswith("message:")]
    return line


def test_the_simulated_result_is_what_the_runner_writes_for_a_successful_step() -> None:
    _, runner_text = render_result(StepResult(ok=True, output={"simulated": True}), Redactor(), "")
    assert json.loads(result_message(SUCCEEDED_RESULT)) == json.loads(runner_text)


def test_the_complete_stage_writes_the_message_verbatim_into_the_termination_state() -> None:
    message = result_message({**SUCCEEDED_RESULT, "output": {"quote": 'a "b" \\ c', "nested": {"list": [{}]}}})
    template = _complete_stage(message)["spec"]["next"]["statusTemplate"]  # type: ignore[index]
    assert yaml.safe_load(_message_line(template)) == {"message": message}


def test_the_operator_reads_the_message_as_a_successful_step_result() -> None:
    message = result_message(SUCCEEDED_RESULT)
    pod = {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": message}}}]}}
    result = parse_result(pod)
    assert result is not None
    assert result.ok
    assert result.output == {"simulated": True}


def test_only_pods_of_jobs_are_completed() -> None:
    selector = _complete_stage(result_message(SUCCEEDED_RESULT))["spec"]["selector"]  # type: ignore[index]
    owner = [e for e in selector["matchExpressions"] if e["key"] == ".metadata.ownerReferences.[].kind"]
    assert owner == [{"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}]


def test_the_config_file_holds_only_pod_stages_so_kwok_keeps_its_node_heartbeat() -> None:
    documents = list(yaml.safe_load_all(kwok_config_text(result_message(SUCCEEDED_RESULT))))
    assert {d["kind"] for d in documents} == {"Stage"}
    assert {d["spec"]["resourceRef"]["kind"] for d in documents} == {"Pod"}
    assert sorted(d["metadata"]["name"] for d in documents) == ["pod-complete", "pod-delete", "pod-ready"]


def test_the_fake_node_is_selected_by_kwok_annotation() -> None:
    assert fake_node()["metadata"]["annotations"] == {MANAGED_ANNOTATION: "fake"}


def test_a_result_beyond_the_termination_message_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        result_message({**SUCCEEDED_RESULT, "output": "x" * RESULT_LIMIT_BYTES})


def test_a_result_with_go_template_delimiters_is_refused() -> None:
    with pytest.raises(ValueError, match="template"):
        result_message({**SUCCEEDED_RESULT, "output": "{{ Now }}"})


def test_another_engines_pods_are_completed_only_when_its_kind_owns_them() -> None:
    stage = complete_owned_by("argoproj.io/v1alpha1", "Workflow")
    expressions = stage["spec"]["selector"]["matchExpressions"]
    assert {"key": ".metadata.ownerReferences.[].apiVersion", "operator": "In",
            "values": ["argoproj.io/v1alpha1"]} in expressions
    assert {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Workflow"]} in expressions
    documents = list(yaml.safe_load_all(kwok_config_text(result_message(SUCCEEDED_RESULT), (stage,))))
    assert sorted(d["metadata"]["name"] for d in documents) == [
        "pod-complete", "pod-complete-workflow", "pod-delete", "pod-ready"]


def test_with_a_logs_file_kwok_serves_it_as_every_containers_log_without_following(tmp_path: Path) -> None:
    logs_file = tmp_path / "container.log"
    documents = list(yaml.safe_load_all(kwok_config_text(result_message(SUCCEEDED_RESULT), logs_file=logs_file)))
    (rule,) = [d for d in documents if d["kind"] == "ClusterLogs"]
    assert "selector" not in rule["spec"]  # every pod of kwok's nodes
    assert rule["spec"]["logs"] == [{"logsFile": str(logs_file), "follow": False}]
    assert not [d for d in yaml.safe_load_all(kwok_config_text("")) if d["kind"] == "ClusterLogs"]


def test_the_served_log_is_in_the_container_runtimes_format_one_full_stdout_line_each() -> None:
    at = datetime.datetime(2026, 12, 6, 16, 1, 2, 345678, tzinfo=datetime.UTC)
    assert cri_log("first line\nsecond: {x}\n", at) == (
        "2026-12-06T16:01:02.345678Z stdout F first line\n2026-12-06T16:01:02.345678Z stdout F second: {x}\n")

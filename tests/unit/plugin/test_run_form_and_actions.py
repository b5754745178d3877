"""The web view's start form (fields from a Workflow's params, answers checked by the operator's own rule) and
which run operations apply to a run as it stands. Pure: no API server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from towline.api.runterms import RESUME_ANNOTATION
from towline.api.workflow import Param
from towline.engine.start import resolve_params
from towline.plugin import runactions
from towline.plugin.manifests import UsageError
from towline.plugin.ui import forms

WORKFLOW: dict[str, Any] = {
    "metadata": {"name": "renewal-watch", "namespace": "sales"},
    "spec": {"params": [
        {"name": "threshold_days", "type": "integer", "default": 90, "description": "how far ahead"},
        {"name": "region", "type": "string", "required": True},
        {"name": "ratio", "type": "number", "default": 0.5},
        {"name": "dry", "type": "boolean", "default": False},
        {"name": "accounts", "type": "array"},
        {"name": "labels", "type": "object", "default": {"tier": "gold"}},
    ], "steps": [{"id": "a", "action": "data.transform"}]},
}


def test_the_form_has_a_field_per_param_with_its_type_requirement_and_default() -> None:
    fields = {f["name"]: f for f in forms.form_fields(WORKFLOW)}
    assert list(fields) == ["threshold_days", "region", "ratio", "dry", "accounts", "labels"]
    assert fields["threshold_days"].items() >= {"type": "integer", "control": "number", "required": False,
                                                 "hasDefault": True, "default": 90, "defaultText": "90",
                                                 "description": "how far ahead"}.items()
    assert fields["region"]["required"] is True and fields["region"]["hasDefault"] is False
    assert fields["dry"]["control"] == "checkbox" and fields["accounts"]["control"] == "json"
    assert fields["labels"]["defaultText"] == '{"tier": "gold"}'


def test_answers_are_read_as_their_declared_types_and_empty_ones_take_the_default() -> None:
    params, problems = forms.read_answers(WORKFLOW, {"params": {
        "threshold_days": " 30 ", "region": "emea", "ratio": "2.5", "dry": True, "accounts": '["a", "b"]',
        "labels": ""}})
    assert problems == {}
    assert params == {"threshold_days": 30, "region": "emea", "ratio": 2.5, "dry": True, "accounts": ["a", "b"]}


@pytest.mark.parametrize(("answers", "field", "says"), [
    ({"region": ""}, "region", "required (string)"),
    ({"region": "x", "threshold_days": "ninety"}, "threshold_days", "expected a whole number"),
    ({"region": "x", "threshold_days": "3.5"}, "threshold_days", "expected a whole number"),
    ({"region": "x", "ratio": "lots"}, "ratio", "expected number as JSON"),
    ({"region": "x", "accounts": "[unclosed"}, "accounts", "expected array as JSON"),
    ({"region": "x", "accounts": '{"a": 1}'}, "accounts", "expected array, got dict"),
    ({"region": "x", "dry": "maybe"}, "dry", "expected true or false"),
    ({"region": "x", "labels": "[1]"}, "labels", "expected object, got list"),
    ({"region": "x", "colour": "red"}, "colour", "declares no such param"),
    ({"region": 7}, "region", "expected string, got int"),
])
def test_a_bad_answer_is_named_at_its_field(answers: dict[str, Any], field: str, says: str) -> None:
    _, problems = forms.read_answers(WORKFLOW, {"params": answers})
    assert list(problems) == [field] and says in problems[field]


def test_the_form_refuses_exactly_what_the_operator_refuses_when_the_run_starts() -> None:
    """One meaning: for typed values, the form's problems are the operator's resolve_params errors."""
    declared = [Param.model_validate(p) for p in WORKFLOW["spec"]["params"]]
    for supplied in ({}, {"region": "x"}, {"region": 1, "ratio": True}, {"region": "x", "extra": 1},
                     {"region": "x", "dry": 0}):
        _, problems = forms.read_answers(WORKFLOW, {"params": supplied})
        assert sorted(problems.values()) == sorted(resolve_params(declared, supplied)[1])


def test_answers_that_are_not_a_mapping_are_refused_as_a_whole() -> None:
    assert list(forms.read_answers(WORKFLOW, ["region"])[1]) == [""]
    assert list(forms.read_answers(WORKFLOW, {"params": "region=x"})[1]) == [""]


def run(phase: str, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "workflowSpec": {"steps": []}}
    return {"metadata": {"name": "r1"}, "spec": {"workflowRef": {"name": "wf"}, **spec}, "status": status}


@pytest.mark.parametrize(("the_run", "offered"), [
    (run("Running"), ["cancel", "stop", "suspend", "resubmit"]),
    (run("AwaitingApproval"), ["cancel", "stop", "suspend", "resubmit"]),
    (run("Running", suspend=True), ["cancel", "stop", "resume", "resubmit"]),
    (run("Running", cancel=True), ["stop", "resubmit"]),
    (run("Running", cancel=True, stop=True), ["resubmit"]),
    (run("Failed"), ["retry", "resubmit"]),
    (run("Cancelled"), ["retry", "resubmit"]),
    (run("Succeeded"), ["resubmit"]),
    ({"metadata": {"name": "r"}, "spec": {"workflowRef": {"name": "wf"}}, "status": {"phase": "Failed"}},
     ["resubmit"]),
])
def test_each_operation_is_offered_only_where_it_applies(the_run: dict[str, Any], offered: list[str]) -> None:
    assert runactions.available(the_run) == offered


def test_resume_is_offered_to_a_run_paused_for_credential_repair() -> None:
    paused = run("Running")
    paused["status"]["conditions"] = [{"type": "CredentialsNeedRepair", "status": "True"}]
    assert runactions.available(paused) == ["cancel", "stop", "suspend", "resume", "resubmit"]


def test_the_switches_are_the_patches_kubectl_towline_sends() -> None:
    now = datetime(2026, 12, 7, 1, 2, 3, 4, tzinfo=UTC)
    assert runactions.switch_patch(run("Running"), "cancel", now) == {"spec": {"cancel": True}}
    assert runactions.switch_patch(run("Running"), "stop", now) == {"spec": {"stop": True}}
    assert runactions.switch_patch(run("Running"), "suspend", now) == {"spec": {"suspend": True}}
    assert runactions.switch_patch(run("Running", suspend=True), "resume", now) == {
        "metadata": {"annotations": {RESUME_ANNOTATION: "20261207T010203.000004Z"}}, "spec": {"suspend": False}}
    assert "spec" not in runactions.switch_patch(run("Running"), "resume", now)


def test_retry_of_a_run_in_flight_is_refused_and_of_a_failed_one_reuses_its_succeeded_steps() -> None:
    with pytest.raises(UsageError, match="retry it once it has finished"):
        runactions.retry_body(run("Running"), "alice")
    failed = run("Failed")
    failed["status"]["workflowSpec"] = {"steps": [{"id": "a"}, {"id": "b", "needs": ["a"]}]}
    failed["status"]["steps"] = [{"id": "a", "phase": "Succeeded"}, {"id": "b", "phase": "Failed"}]
    body = runactions.retry_body(failed, "alice")
    assert body["spec"] == {"workflowRef": {"name": "wf"}, "requestedBy": "alice",
                            "retryOf": {"run": "r1", "reuse": ["a"]}}


def test_a_retrys_options_are_the_clis_flags_with_answers_typed_and_empty_ones_keeping_the_runs() -> None:
    # `retry --workflow-changed -p threshold_days=30 -p dry=true`; region left empty keeps the run's value, and a
    # required param left out is no problem here (the retry keeps the run's; the retry plan checks the whole).
    body = {"workflowChanged": True, "params": {"threshold_days": "30", "dry": "true", "region": ""}}
    assert forms.read_retry(WORKFLOW, body) == (True, {"threshold_days": 30, "dry": True}, {})
    # The run page's plain retry button sends no options: the CLI's plain retry.
    assert forms.read_retry(WORKFLOW, {}) == (False, {}, {})


@pytest.mark.parametrize(("body", "field", "says"), [
    ({"params": {"threshold_days": "soon"}}, "threshold_days", "whole number"),
    ({"params": {"labels": "{tier"}}, "labels", "JSON"),
    ({"workflowChanged": "yes"}, "workflowChanged", "true or false"),
    ({"params": ["threshold_days=30"]}, "params", "{NAME: VALUE}"),
    ({"workflowchanged": True}, "", "no retry option workflowchanged"),
    (None, "", "send a retry's options as"),
])
def test_a_bad_retry_option_is_named_at_its_field(body: Any, field: str, says: str) -> None:
    _, _, problems = forms.read_retry(WORKFLOW, body)
    assert says in problems[field], problems

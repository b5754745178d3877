"""Code steps are off until the chart turns them on; where they are off a Workflow naming one is not Ready."""

from __future__ import annotations

from typing import Any

import pytest

from towline.runtime.config import code_step_policy
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog
from towline.validation.codesteps import CodeStepPolicy
from towline.validation.steptypes import catalog_from

SPEC: dict[str, Any] = {"steps": [
    {"id": "shape", "action": "code.python", "with": {"source": "def main(inputs):\n    return 1\n"}},
    {"id": "plain", "action": "data.transform", "with": {"fields": {"a": "1"}}},
    {"id": "wasm", "action": "code.wasm", "with": {"module": {"configMap": {"name": "m", "key": "k"}}}},
]}


def errors_in(namespace: str, policy: CodeStepPolicy) -> dict[str, str]:
    catalog = catalog_from(connector_catalog(), {}, policy.why_off(namespace))
    _, errors = validate_workflow_manifest(SPEC, catalog)
    return {error.field: error.message for error in errors}


def test_off_by_default_with_the_chart_value_that_turns_them_on() -> None:
    errors = errors_in("team", CodeStepPolicy())
    assert set(errors) == {"spec.steps[0].action", "spec.steps[2].action"}
    assert errors["spec.steps[0].action"].startswith("code.python is a code step, and code steps are off")
    assert "codeSteps.enabled=true" in errors["spec.steps[2].action"]


def test_on_everywhere_or_in_listed_namespaces_and_prefixes() -> None:
    assert errors_in("team", CodeStepPolicy(enabled=True)) == {}
    listed = CodeStepPolicy(enabled=True, namespaces=("data", "team-*"))
    assert errors_in("data", listed) == {} and errors_in("team-a", listed) == {}
    refused = errors_in("payments", listed)
    assert "not enabled in namespace payments" in refused["spec.steps[0].action"]
    assert "codeSteps.namespaces" in refused["spec.steps[0].action"]
    assert listed.refusals("payments", ["code.python", "data.transform"], {"code.python"}) == [
        f"code.python {listed.why_off('payments')}"]


def test_the_operator_reads_the_policy_from_the_charts_variables() -> None:
    assert code_step_policy({}) == CodeStepPolicy()
    assert code_step_policy({"TOWLINE_CODE_STEPS": "true", "TOWLINE_CODE_STEP_NAMESPACES": "a, team-*"}) == \
        CodeStepPolicy(enabled=True, namespaces=("a", "team-*"))
    with pytest.raises(ValueError, match=r"codeSteps\.enabled"):
        code_step_policy({"TOWLINE_CODE_STEPS": "yes"})


def test_a_python_syntax_error_is_found_when_the_workflow_is_validated() -> None:
    spec = {"steps": [{"id": "shape", "action": "code.python", "with": {"source": "def main(inputs):\n  return (\n"}}]}
    _, errors = validate_workflow_manifest(spec, connector_catalog())
    assert [error.field for error in errors] == ["spec.steps[0].with.source"], errors
    assert "is not valid Python" in errors[0].message and "line 2" in errors[0].message

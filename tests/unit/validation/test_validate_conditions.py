"""The Ready condition (and Stalled) the operator writes, and the real connector catalog."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

from towline.api.common import Condition
from towline.api.workflow import ValidationError
from towline.validation import ready_condition, validate_workflow_manifest, workflow_conditions
from towline.validation.catalog import connector_catalog

NOW = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
PROBLEM = ValidationError(field="spec.steps[0].needs[0]", message="'lod' is not a step id; did you mean 'load'?")


def test_a_valid_spec_is_ready_for_its_generation() -> None:
    condition = ready_condition([], generation=3, now=NOW)
    assert (condition.type, condition.status, condition.reason) == ("Ready", "True", "Valid")
    assert condition.observed_generation == 3
    assert condition.last_transition_time == NOW


def test_an_invalid_spec_is_not_ready_and_says_why() -> None:
    condition = ready_condition([PROBLEM], generation=4, now=NOW)
    assert (condition.status, condition.reason, condition.observed_generation) == ("False", "InvalidSpec", 4)
    assert condition.message == (
        "1 problem in the spec: spec.steps[0].needs[0]: 'lod' is not a step id; did you mean 'load'?"
    )


def test_a_long_list_of_problems_is_summarised() -> None:
    condition = ready_condition([PROBLEM] * 8, generation=1, now=NOW)
    assert condition.message.startswith("8 problems in the spec: ")
    assert condition.message.endswith("; and 3 more in status.validationErrors")


def test_invalid_specs_are_also_stalled_so_kstatus_reports_them_failed() -> None:
    conditions = workflow_conditions([], [PROBLEM], generation=2, now=NOW)
    assert [(c.type, c.status) for c in conditions] == [("Ready", "False"), ("Stalled", "True")]


def test_fixing_the_spec_clears_stalled_and_keeps_other_conditions() -> None:
    other = Condition(type="Scheduled", status="True", reason="Ok", last_transition_time=NOW)
    before = workflow_conditions([other], [PROBLEM], generation=2, now=NOW)
    after = workflow_conditions(before, [], generation=3, now=NOW + timedelta(minutes=1))
    assert [(c.type, c.status) for c in after] == [("Scheduled", "True"), ("Ready", "True")]


def test_last_transition_time_moves_only_when_the_status_changes() -> None:
    first = workflow_conditions([], [PROBLEM], generation=2, now=NOW)
    later = NOW + timedelta(hours=1)
    again = workflow_conditions(first, [PROBLEM, PROBLEM], generation=3, now=later)
    assert {c.type: c.last_transition_time for c in again} == {"Ready": NOW, "Stalled": NOW}
    assert again[0].observed_generation == 3
    fixed = workflow_conditions(again, [], generation=4, now=later)
    assert fixed[0].last_transition_time == later


def test_validation_never_imports_a_kubernetes_client() -> None:
    code = "import sys, towline.validation; print(sorted(m for m in sys.modules if m.startswith('kubernetes')))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def test_the_real_connector_catalog_validates_a_workflow() -> None:
    catalog = connector_catalog()  # the connectors ship in this repository: their absence is a failure
    assert {"http.request", "notify.slack", "ai.chat"} <= set(catalog.known_actions())
    spec = {"steps": [
        {"id": "check", "action": "http.request", "with": {"url": "https://status.example.com", "method": "GET"}},
        {"id": "tell", "needs": ["check"], "action": "notify.slack", "with": {"text": "up"}},
    ]}
    _, errors = validate_workflow_manifest(spec, catalog)
    assert [e.field for e in errors] == ["spec.steps[1].credentials"]
    assert catalog.is_mutating("http.request", {"method": "POST"})
    assert not catalog.is_mutating("http.request", {"method": "GET"})

"""The input limits mean one thing everywhere: the models' constants and the chart's admission policy."""

from __future__ import annotations

from pathlib import Path

from towline.api.run import (
    MAX_INPUT_DEPTH,
    MAX_INPUT_ITEMS,
    MAX_SPEC_DEPTH,
    MAX_SPEC_ITEMS,
    bounded_nesting_rule,
)

POLICIES = Path(__file__).resolve().parents[3] / "charts" / "towline" / "templates" / "admission-policies.yaml"


def test_chart_checks_the_nesting_and_lengths_the_models_declare() -> None:
    text = POLICIES.read_text()
    assert bounded_nesting_rule("object.spec.params", MAX_INPUT_DEPTH, MAX_INPUT_ITEMS) in text
    assert bounded_nesting_rule("object.spec.trigger.data", MAX_INPUT_DEPTH, MAX_INPUT_ITEMS) in text
    assert bounded_nesting_rule("object.spec", MAX_SPEC_DEPTH, MAX_SPEC_ITEMS) in text


def test_the_rule_grows_linearly_with_depth() -> None:
    assert len(bounded_nesting_rule("x", 64, 1)) < 2 * len(bounded_nesting_rule("x", 32, 1)) + 300

"""The input limits mean one thing everywhere: the engine's check and the chart's admission policy."""

from __future__ import annotations

from pathlib import Path

from towline.api.run import MAX_INPUT_DEPTH, MAX_SPEC_DEPTH, nesting_depth_rule

POLICIES = Path(__file__).resolve().parents[3] / "charts" / "towline" / "templates" / "admission-policies.yaml"


def test_chart_checks_the_nesting_depths_the_models_declare() -> None:
    text = POLICIES.read_text()
    assert nesting_depth_rule("object.spec.params", MAX_INPUT_DEPTH) in text
    assert nesting_depth_rule("object.spec.trigger.data", MAX_INPUT_DEPTH) in text
    assert nesting_depth_rule("object.spec", MAX_SPEC_DEPTH) in text


def test_depth_rule_grows_linearly() -> None:
    assert len(nesting_depth_rule("x", 64)) < 2 * len(nesting_depth_rule("x", 32)) + 200

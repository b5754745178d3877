"""The chart's alerting rules pass `promtool check rules` and `promtool test rules`, and the chart ships them
(and the Grafana dashboard) as they are in charts/towline/files.

promtool is the pinned Prometheus release's, built by `make binaries` (towline_dev.promtool). The rule
tests (tests/fixtures/alerts/alerts_test.yaml) give each alert series that make it fire and series that
must leave it quiet; the last tests prove they can fail: a wrong expectation, and a loosened rule.
Nothing here needs a cluster. Which metrics the rules and the dashboard read is checked against the
processes' registries in tests/unit/chart/test_chart_dashboard.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.helmsupport import find, render, template

from towline_dev.binaries import BinarySet
from towline_dev.promtool import find_promtool, promtool

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
ALERTS = REPO / "charts" / "towline" / "files" / "alerts.yaml"
DASHBOARD = REPO / "charts" / "towline" / "files" / "dashboard.json"
RULE_TESTS = REPO / "tests" / "fixtures" / "alerts" / "alerts_test.yaml"
MONITORING_APIS = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")


@pytest.fixture(scope="module")
def promtool_binary() -> Path:
    return find_promtool()


def alert_names() -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"]]


def test_the_rules_are_valid(promtool_binary: Path) -> None:
    result = promtool(promtool_binary, "check", "rules", ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in result.stdout, result.stdout


def test_every_alert_fires_and_stays_quiet_as_its_tests_say(promtool_binary: Path) -> None:
    result = promtool(promtool_binary, "test", "rules", RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout
    # Each alert is tested both ways: at some time it fires, at another (or for other series) it does not.
    checks = [check for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for check in test["alert_rule_test"]]
    for alert in alert_names():
        mine = [check for check in checks if check["alertname"] == alert]
        assert any(check["exp_alerts"] for check in mine), f"{alert} is never shown firing"
        assert any(not check["exp_alerts"] for check in mine), f"{alert} is never shown quiet"


def _rule_tests_on(tmp_path: Path, alerts: str, change_tests: Any = None) -> Path:
    """A copy of the rule tests reading `alerts` (changed rules) and changed by `change_tests`."""
    rules = tmp_path / "alerts.yaml"
    rules.write_text(alerts)
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = [str(rules)]
    if change_tests is not None:
        change_tests(tests)
    path = tmp_path / "alerts_test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    return path


def test_a_wrong_expectation_fails(promtool_binary: Path, tmp_path: Path) -> None:
    def expect_the_wrong_workflow(tests: dict[str, Any]) -> None:
        tests["tests"][0]["alert_rule_test"][0]["exp_alerts"][0]["exp_labels"]["workflow"] = "sync"

    result = promtool(promtool_binary, "test", "rules",
                      _rule_tests_on(tmp_path, ALERTS.read_text(), expect_the_wrong_workflow))
    assert result.returncode != 0
    assert "TowlineRunsFailing" in result.stdout + result.stderr and "sync" in result.stdout + result.stderr


def test_a_loosened_rule_fails_its_quiet_cases(promtool_binary: Path, tmp_path: Path) -> None:
    """TowlineRunsFailing at a fifth instead of a half: workflow sync (a quarter failed) now fires too."""
    loosened = ALERTS.read_text().replace(") > 0.5\n          and", ") > 0.2\n          and", 1)
    assert loosened != ALERTS.read_text()
    result = promtool(promtool_binary, "test", "rules", _rule_tests_on(tmp_path, loosened))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "TowlineRunsFailing" in output and 'workflow="sync"' in output, output


def test_the_chart_ships_the_same_rules_and_dashboard(
    k8s_binaries: BinarySet, promtool_binary: Path, tmp_path: Path
) -> None:
    assert not [d for d in render(k8s_binaries) if d["kind"] == "PrometheusRule"
                or d["metadata"]["name"] == "towline-dashboard"], "on by default"
    refused = template(k8s_binaries, {"prometheusRule.enabled": "true"})
    assert refused.returncode != 0 and "Prometheus Operator's CRDs" in refused.stderr, refused.stderr
    documents = render(k8s_binaries, {"prometheusRule.enabled": "true", "prometheusRule.labels.release": "prometheus",
                                      "grafanaDashboard.enabled": "true", "grafanaDashboard.namespace": "monitoring"},
                       *MONITORING_APIS)
    rule = find(documents, "PrometheusRule", "towline-alerts", "towline-system")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    rendered_rules = tmp_path / "rendered.yaml"
    rendered_rules.write_text(yaml.safe_dump(rule["spec"]))
    checked = promtool(promtool_binary, "check", "rules", rendered_rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    board = find(documents, "ConfigMap", "towline-dashboard", "monitoring")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["towline.json"]) == json.loads(DASHBOARD.read_text())

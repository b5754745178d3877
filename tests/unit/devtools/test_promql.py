"""towline_dev.promql: which identifiers of a PromQL expression are metric names, and which are not."""

from __future__ import annotations

import pytest

from towline_dev.promql import grafana_query_metric_names, metric_names

CASES = {
    "a bare metric": ("towline_leader", {"towline_leader"}),
    "matchers with strings, regexes and a Grafana variable": (
        'towline_runs{namespace=~"$namespace", phase!="Succeeded", workflow=~"a}b|c"}', {"towline_runs"}),
    "a range, a function and an aggregation with by": (
        "sum by (namespace, workflow) (increase(towline_runs_finished_total{outcome=\"Failed\"}[1h]))",
        {"towline_runs_finished_total"}),
    "by after the aggregation, and a Grafana interval": (
        "histogram_quantile(0.95, sum(rate(towline_step_duration_seconds_bucket[$__rate_interval])) by (le, action))",
        {"towline_step_duration_seconds_bucket"}),
    "vector matching with on, group_left and ignoring": (
        "process_resident_memory_bytes * on (instance, job) group_left (version) towline_build_info"
        " / ignoring (code) up",
        {"process_resident_memory_bytes", "towline_build_info", "up"}),
    "keywords, bool, numbers, offsets and @": (
        "a > bool 1.5e3 and b offset 5m unless c @ 1609746000 or d @ start() or e == Inf - NaN + 0x1f",
        {"a", "b", "c", "d", "e"}),
    "without, topk and a subquery": (
        "topk(5, max without (instance) (rate(towline_api_requests_total[5m:30s])))",
        {"towline_api_requests_total"}),
    "label_replace's strings": (
        'label_replace(towline_workqueue_depth, "queue", "$1", "name", "(.*)")', {"towline_workqueue_depth"}),
    "time() only": ("time() - 3600", set()),
    "a recording rule name with colons, ${var} and escaped quotes": (
        'job:towline_runs:sum{ns="${namespace:regex}", x="a\\"b"} - towline_leader', {"job:towline_runs:sum",
                                                                                     "towline_leader"}),
    "a multi-line expression": ("(\n  sum(rate(x_total[15m]))\n    /\n  sum(rate(y_total[15m]))\n) > 0.5",
                                {"x_total", "y_total"}),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_metric_names(case: str) -> None:
    expr, expected = CASES[case]
    assert metric_names(expr) == expected


@pytest.mark.parametrize("expr", ['{__name__="towline_runs"}', 'sum(rate({__name__=~"towline_.*"}[5m]))'])
def test_a_metric_named_by_a_name_matcher_is_refused_not_read_as_none(expr: str) -> None:
    with pytest.raises(ValueError, match="__name__"):
        metric_names(expr)


@pytest.mark.parametrize("expr", ['towline_runs{namespace="a', "sum(rate(x[5m)", "x # y"])
def test_malformed_expressions_are_refused(expr: str) -> None:
    with pytest.raises(ValueError):
        metric_names(expr)


def test_grafana_variable_queries() -> None:
    assert grafana_query_metric_names("label_values(towline_runs, namespace)") == {"towline_runs"}
    assert grafana_query_metric_names('label_values(towline_runs{phase="Running"}, workflow)') == {"towline_runs"}
    assert grafana_query_metric_names("query_result(max by (namespace) (towline_approvals_pending))") == {
        "towline_approvals_pending"}

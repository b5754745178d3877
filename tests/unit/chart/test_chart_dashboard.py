"""The chart's dashboard and alerts read only metrics Towline exports, and the docs list every one.

The operator's and the ingress's registries are listed in a fresh interpreter each, after importing
what that process imports (the operator also registers its scrape-time gauges), so a metric one
process lacks, or a name that was renamed, fails here rather than as an empty panel or an alert
that can never fire. PromQL is read by towline_dev.promql.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from towline_dev.promql import grafana_query_metric_names, metric_names

REPO = Path(__file__).parents[3]
FILES = REPO / "charts" / "towline" / "files"
OPERATING = REPO / "docs" / "operating.md"

PROCESSES = {
    "operator": "import towline.runtime.wiring\n"
                "from towline.metrics import export_operator_state\n"
                "export_operator_state(lambda: [], lambda: False)\n",
    "ingress": "import towline.triggers.ingress.server\n",
    "archive": "import towline.archive.app\n",
}
LIST_FAMILIES = ("import json\nfrom prometheus_client import REGISTRY\n"
                 "print(json.dumps([(family.name, family.type) for family in REGISTRY.collect()]))\n")
SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                   "summary": ("", "_sum", "_count"), "info": ("_info",), "gauge": ("",), "unknown": ("",),
                   "stateset": ("",), "gaugehistogram": ("_bucket", "_gsum", "_gcount")}
"""The series names prometheus_client exposes for a family of each type (`_created` left out)."""


@cache
def families(process: str) -> dict[str, str]:
    """Name -> type of every metric family `process` registers."""
    listed = subprocess.run([sys.executable, "-c", PROCESSES[process] + LIST_FAMILIES], capture_output=True,
                            text=True, check=True, timeout=120)
    return dict(json.loads(listed.stdout))


def series_names(process: str) -> set[str]:
    return {name + suffix for name, kind in families(process).items() for suffix in SAMPLE_SUFFIXES[kind]}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FILES / "dashboard.json").read_text())
    return loaded


def dashboard_queries(board: dict[str, Any] | None = None) -> list[tuple[str, set[str]]]:
    """(where, metric names) of every panel target and every variable query."""
    board = board or dashboard()
    queries = [(f"panel {panel['title']!r} {target['refId']}", metric_names(target["expr"]))
               for panel in board["panels"] for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            queries.append((f"variable {variable['name']}", grafana_query_metric_names(variable["query"]["query"])))
    return queries


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((FILES / "alerts.yaml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_the_two_processes_export_the_metrics_the_dashboard_is_built_on() -> None:
    """The listing itself is right: it would not pass by listing nothing, or the wrong process."""
    operator, ingress = series_names("operator"), series_names("ingress")
    assert {"towline_runs", "towline_leader", "towline_run_duration_seconds_bucket", "towline_build_info",
            "towline_approval_next_expiry_timestamp_seconds", "towline_egress_isolation_missing_total",
            "towline_runs_finished_total", "towline_workqueue_retries_total",
            "process_resident_memory_bytes"} <= operator
    assert {"towline_webhook_deliveries_total", "towline_webhook_request_seconds_bucket", "towline_build_info",
            "towline_api_requests_total"} <= ingress
    assert "towline_webhook_deliveries_total" not in operator and "towline_runs" not in ingress


def test_every_dashboard_query_names_only_metrics_that_exist() -> None:
    known = series_names("operator") | series_names("ingress") | series_names("archive")
    queries = dashboard_queries()
    assert len(queries) >= 20
    for where, names in queries:
        assert names, f"{where} reads no metric"
        assert names <= known, f"{where} reads {sorted(names - known)}, which neither process exports"


def test_a_misspelt_metric_in_the_dashboard_would_be_found() -> None:
    board = dashboard()
    target = board["panels"][2]["targets"][0]
    target["expr"] = target["expr"].replace("towline_runs", "towline_run", 1)
    known = series_names("operator") | series_names("ingress") | series_names("archive")
    unknown = [(where, names - known) for where, names in dashboard_queries(board) if names - known]
    assert unknown == [(f"panel {board['panels'][2]['title']!r} A", {"towline_run"})]


def test_every_alert_names_only_metrics_that_exist() -> None:
    known = series_names("operator") | series_names("ingress") | series_names("archive")
    rules = alert_rules()
    assert len(rules) >= 7
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names, f"{rule['alert']} reads no metric"
        assert names <= known, f"{rule['alert']} reads {sorted(names - known)}, which neither process exports"


def test_the_dashboard_is_one_grafana_dashboard_on_a_chosen_prometheus() -> None:
    board = dashboard()
    assert board["uid"] == "towline" and board["title"] == "Towline"
    panels = board["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"] and panel["description"], panel["title"]
            assert {target["refId"] for target in panel["targets"]} == {
                chr(65 + index) for index in range(len(panel["targets"]))}
    # No two panels overlap on Grafana's 24-column grid.
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        place = panel["gridPos"]
        assert place["x"] + place["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(place["x"], place["x"] + place["w"])
                for y in range(place["y"], place["y"] + place["h"])}
        assert not cells & area, panel["title"]
        cells |= area


def test_the_docs_list_every_towline_metric_and_every_alert() -> None:
    text = OPERATING.read_text()
    for process in PROCESSES:
        for name in families(process):
            if name.startswith("towline_"):
                exported = name + SAMPLE_SUFFIXES[families(process)[name]][0]
                assert f"`{exported}`" in text or f"`{name}`" in text, f"docs/operating.md does not list {exported}"
    for rule in alert_rules():
        assert re.search(rf"^\| `{rule['alert']}` \|", text, re.M), f"docs/operating.md does not list {rule['alert']}"

"""The chart keeps the ingress's health, readiness and metrics off its public Service.

The public Service `towline-ingress` carries deliveries only; the admin port
(probes, /metrics) has its own ClusterIP Service, its own ServiceMonitor, and a
NetworkPolicy rule limited to `networkPolicy.metricsFrom`.
"""

from __future__ import annotations

import pytest
from tests.integration.helmsupport import find, render

from towline_dev.binaries import BinarySet

pytestmark = pytest.mark.integration

INGRESS_POD_LABELS = {"app.kubernetes.io/name": "towline", "app.kubernetes.io/component": "ingress"}


def test_the_public_service_carries_only_deliveries_and_the_admin_port_has_its_own(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"ingress.adminPort": "9191"})
    public = find(documents, "Service", "towline-ingress")["spec"]
    assert [port["targetPort"] for port in public["ports"]] == ["http"]
    metrics = find(documents, "Service", "towline-ingress-metrics")["spec"]
    assert metrics["type"] == "ClusterIP" and metrics["selector"] == INGRESS_POD_LABELS
    assert metrics["ports"] == [{"name": "metrics", "port": 9191, "targetPort": "admin"}]
    container = find(documents, "Deployment", "towline-ingress")["spec"]["template"]["spec"]["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": 8080, "admin": 9191}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["TOWLINE_INGRESS_ADMIN_PORT"] == "9191"
    assert env["TOWLINE_INGRESS_NAMESPACE_IN_FLIGHT"] == "16"
    assert env["TOWLINE_INGRESS_MAX_BUFFERED_BYTES"] == str(64 * 1024 * 1024)
    assert env["TOWLINE_INGRESS_MIN_BODY_RATE"] == "8192"


def test_the_admin_port_admits_only_the_metrics_scrapers(k8s_binaries: BinarySet) -> None:
    scrapers = {"networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team": "observability"}
    documents = render(k8s_binaries, scrapers)
    rules = find(documents, "NetworkPolicy", "towline-ingress")["spec"]["ingress"]
    assert rules == [
        {"ports": [{"protocol": "TCP", "port": 8080}]},
        {"ports": [{"protocol": "TCP", "port": 9090}],
         "from": [{"namespaceSelector": {"matchLabels": {"team": "observability"}}}]},
    ]


def test_the_ingress_service_monitor_selects_the_metrics_service_only(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"serviceMonitor.enabled": "true"},
                       "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    monitor = find(documents, "ServiceMonitor", "towline-ingress")["spec"]
    selected = [d["metadata"]["name"] for d in documents if d["kind"] == "Service"
                and monitor["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()]
    assert selected == ["towline-ingress-metrics"]
    assert monitor["endpoints"][0]["port"] == "metrics"
    assert not [d for d in render(k8s_binaries, {"serviceMonitor.enabled": "true", "ingress.enabled": "false"},
                                  "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
                # The policy confining the ingress's identity (towline-ingress-runs) stays: it only ever refuses.
                if d["metadata"]["name"].startswith("towline-ingress")
                and not d["kind"].startswith("ValidatingAdmission")]

"""The Helm chart: it lints, renders, and its operator role never reaches Secrets."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from towline_dev.controlplane import ControlPlane
from towline_dev.install import CHART, OPERATOR_NAMESPACE
from towline_dev.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.integration


def helm(cluster: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cluster.binaries.path("helm")), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_chart_lints_cleanly(control_plane: ControlPlane) -> None:
    result = helm(control_plane, "lint", str(CHART), "--strict", "--kube-version", KUBERNETES_VERSION)
    assert result.returncode == 0, result.stdout + result.stderr


def test_operator_cluster_role_grants_nothing_on_secrets(control_plane: ControlPlane) -> None:
    rendered = helm(control_plane, "template", "towline", str(CHART), "--namespace", OPERATOR_NAMESPACE,
                    "--kube-version", KUBERNETES_VERSION)
    assert rendered.returncode == 0, rendered.stderr
    documents = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    roles = [d for d in documents if d["kind"] in {"ClusterRole", "Role"}]
    assert {r["metadata"]["name"] for r in roles} >= {"towline-operator", "towline-operator-leader-election"}
    for role in roles:
        for rule in role["rules"]:
            assert "secrets" not in rule.get("resources", []), role["metadata"]["name"]
            assert "*" not in rule.get("resources", []) and "*" not in rule.get("verbs", []), role["metadata"]["name"]
    kinds = sorted({d["kind"] for d in documents})
    assert "ValidatingAdmissionPolicy" in kinds and "Deployment" in kinds


def test_ingress_runs_as_the_service_account_the_values_name(control_plane: ControlPlane) -> None:
    rendered = helm(control_plane, "template", "towline", str(CHART), "--namespace", OPERATOR_NAMESPACE,
                    "--kube-version", KUBERNETES_VERSION, "--show-only", "templates/ingress.yaml",
                    "--set", "ingress.serviceAccount.name=webhooks")
    assert rendered.returncode == 0, rendered.stderr
    documents = {d["kind"]: d for d in yaml.safe_load_all(rendered.stdout) if d}
    assert documents["ServiceAccount"]["metadata"]["name"] == "webhooks"
    assert documents["ClusterRoleBinding"]["subjects"][0]["name"] == "webhooks"
    pod = documents["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "webhooks"
    assert pod["containers"][0]["command"] == ["towline", "ingress"]
    resources = {r for rule in documents["ClusterRole"]["rules"] for r in rule["resources"]}
    assert resources == {"workflows", "workflowruns"}
    assert documents["Service"]["spec"]["ports"][0]["targetPort"] == "http"

"""`helm install` with the chart's common knobs set, into a namespace that enforces Pod Security "restricted": the
API server takes every object, and the Deployment controller's pods (the operator's, the archive's and the web
view's, with the overridden security contexts, the extra volumes and the labels) pass "restricted". The values
schema refuses what "restricted" would refuse (test_chart_knobs.py, test_chart_component_knobs.py); with the schema
skipped, the API server refuses such a pod, naming the violation.

On a control plane of the module's own (`helm_cluster`): the pods are made and admitted, none runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.helm.release import Cluster, image_values, install, on, uninstall
from tests.integration.support import wait_for

from towline_dev.release import CHART, NAMESPACE, RELEASE, set_args

pytestmark = pytest.mark.integration

KNOBS = {
    "global.imagePullSecrets": '[{"name": "mirror-regcred"}]',
    "global.revisionHistoryLimit": "2",
    "commonLabels": '{"example.com/team": "platform"}',
    "podLabels": '{"example.com/cost-center": "ops"}',
    "serviceAccount.annotations": '{"example.com/role": "towline"}',
    "operator.podSecurityContext": '{"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001}',
    "operator.containerSecurityContext": '{"runAsUser": 10001, "capabilities": {"drop": ["ALL"], '
                                         '"add": ["NET_BIND_SERVICE"]}}',
    "operator.extraVolumes": '[{"name": "corporate-ca", "configMap": {"name": "corporate-ca", "optional": true}}]',
    "operator.extraVolumeMounts": '[{"name": "corporate-ca", "mountPath": "/etc/ssl/corporate", "readOnly": true}]',
    "operator.extraEnv": '[{"name": "SSL_CERT_FILE", "value": "/etc/ssl/corporate/ca.crt"}, '
                         '{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]',
    "operator.podDisruptionBudget": '{"minAvailable": "50%"}',
    "ingress.podDisruptionBudget": '{"maxUnavailable": "25%"}',
    "ingress.service.annotations": '{"example.com/load-balancer": "internal"}',
    "archive.podSecurityContext": '{"runAsUser": 10002}',
    "stepPods.resources": '{"limits": {"cpu": "2"}}',
    "stepPods.labels": '{"cost-center": "platform"}',
    # The web view's pod with its own security contexts, volumes and environment (its pods are admitted; none runs).
    "ui.enabled": "true", "ui.url": "https://towline.example.com", "ui.oidc.issuer": "https://id.example.com",
    "ui.oidc.clientId": "towline", "ui.oidc.clientSecret.name": "towline-oidc",
    "ui.podSecurityContext": '{"runAsUser": 10005, "fsGroup": 10005}',
    "ui.containerSecurityContext": '{"runAsUser": 10005, "capabilities": {"drop": ["ALL"], '
                                   '"add": ["NET_BIND_SERVICE"]}}',
    "ui.extraVolumes": '[{"name": "corporate-ca", "configMap": {"name": "corporate-ca", "optional": true}}]',
    "ui.extraVolumeMounts": '[{"name": "corporate-ca", "mountPath": "/etc/ssl/corporate", "readOnly": true}]',
    "ui.extraEnv": '[{"name": "SSL_CERT_FILE", "value": "/etc/ssl/corporate/ca.crt"}]',
    "ui.serviceAccount.annotations": '{"example.com/role": "towline-ui"}',
}


@pytest.fixture(scope="module")
def restricted(helm_cluster: Cluster) -> Iterator[Cluster]:
    helm_cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    helm_cluster.kubectl("label", "namespace", NAMESPACE, "--overwrite",
                         "pod-security.kubernetes.io/enforce=restricted")
    uninstall(helm_cluster, RELEASE, NAMESPACE)
    yield helm_cluster
    uninstall(helm_cluster, RELEASE, NAMESPACE)


def pods(cluster: Cluster, component: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(cluster.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}", "-o", "json").stdout)["items"]
    return found


def test_the_knobs_install_and_their_pods_pass_restricted(restricted: Cluster) -> None:
    cluster = restricted
    install(cluster, RELEASE, NAMESPACE, KNOBS)
    operator = wait_for("the operator's pods to be admitted under restricted", lambda: pods(cluster, "operator"))
    pod = operator[0]
    assert pod["metadata"]["labels"]["example.com/cost-center"] == "ops"
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {
        "drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert {"name": "corporate-ca", "configMap": {"name": "corporate-ca", "optional": True,
                                                  "defaultMode": 420}} in pod["spec"]["volumes"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "mirror-regcred"}]
    archive = wait_for("the archive's pod to be admitted under restricted", lambda: pods(cluster, "archive"))
    assert archive[0]["spec"]["securityContext"]["runAsUser"] == 10002
    ui = wait_for("the web view's pod to be admitted under restricted", lambda: pods(cluster, "ui"))
    assert ui[0]["spec"]["securityContext"]["runAsUser"] == 10005
    assert ui[0]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["NET_BIND_SERVICE"]
    assert ui[0]["spec"]["automountServiceAccountToken"] is False
    budget = json.loads(cluster.kubectl("get", "poddisruptionbudget", "towline-operator", "-n", NAMESPACE,
                                        "-o", "json").stdout)
    assert budget["spec"]["minAvailable"] == "50%"
    deployment = json.loads(cluster.kubectl("get", "deployment", "towline-operator", "-n", NAMESPACE,
                                            "-o", "json").stdout)
    assert deployment["spec"]["revisionHistoryLimit"] == 2
    assert deployment["metadata"]["labels"]["example.com/team"] == "platform"
    uninstall(cluster, RELEASE, NAMESPACE)


def test_with_the_schema_skipped_restricted_refuses_a_root_operator_pod(restricted: Cluster) -> None:
    # What the values schema refuses by name (test_chart_knobs.py), the API server refuses too: the schema
    # does not narrow the chart below what a restricted namespace admits, it says so before anything is made.
    cluster = restricted
    result = on(cluster, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--skip-schema-validation",
                *set_args({**image_values(), "operator.podSecurityContext": '{"runAsNonRoot": false, "runAsUser": 0}',
                           "operator.containerSecurityContext": '{"runAsNonRoot": false}'}))
    assert result.returncode == 0, result.stdout + result.stderr

    def refusal() -> str:
        events = cluster.kubectl("get", "events", "-n", NAMESPACE, "--field-selector", "reason=FailedCreate",
                                 "-o", "json").stdout
        return next((e["message"] for e in json.loads(events)["items"] if "towline-operator" in e["message"]), "")

    message = wait_for("the ReplicaSet's pods to be refused", refusal)
    assert 'violates PodSecurity "restricted' in message and "runAsNonRoot" in message, message
    assert pods(cluster, "operator") == []
    uninstall(cluster, RELEASE, NAMESPACE)

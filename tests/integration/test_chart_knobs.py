"""The chart's common knobs (as cert-manager's chart has them): global pull secrets and revision history, labels
on every object and pod, security contexts within Pod Security "restricted", extra volumes and environment,
the ServiceAccount, the Service's annotations, disruption budgets and ServiceMonitors.

Rendered with the pinned helm (`helm template`); nothing here needs a cluster. kubeconform checks the same values
(tests/fixtures/chart/every-optional-object.yaml, test_chart_conformance.py), and
tests/integration/helm/test_helm_install_knobs.py installs them on an API server that enforces "restricted".
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.helmsupport import find, render, template

from towline_dev.binaries import BinarySet

pytestmark = pytest.mark.integration

DEPLOYMENTS = ("towline-operator", "towline-ingress", "towline-archive")
CA_VOLUME = {"name": "corporate-ca", "configMap": {"name": "corporate-ca"}}
CA_MOUNT = {"name": "corporate-ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}


def pod_spec(documents: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(documents, "Deployment", deployment)["spec"]["template"]["spec"]
    return spec


def release_pods(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pods = {name: find(documents, "Deployment", name)["spec"]["template"] for name in DEPLOYMENTS}
    pods["towline-test-operator"] = find(documents, "Pod", "towline-test-operator")
    return pods


def test_global_pull_secrets_join_the_top_level_ones_on_every_pod_and_step_pods(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"global.imagePullSecrets": '[{"name": "mirror"}, {"name": "regcred"}]',
                                      "imagePullSecrets": '[{"name": "regcred"}]'})
    for name, pod in release_pods(documents).items():
        assert pod["spec"]["imagePullSecrets"] == [{"name": "mirror"}, {"name": "regcred"}], name
    env = {v["name"]: v.get("value") for v in pod_spec(documents, "towline-operator")["containers"][0]["env"]}
    assert env["TOWLINE_STEP_IMAGE_PULL_SECRETS"] == "mirror,regcred"


def test_common_labels_go_on_every_object_and_never_replace_the_charts_own(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"commonLabels": json.dumps(
        {"example.com/team": "platform", "app.kubernetes.io/name": "other", "app.kubernetes.io/component": "x"})})
    unlabelled = [(d["kind"], d["metadata"]["name"]) for d in documents
                  if (d["metadata"].get("labels") or {}).get("example.com/team") != "platform"]
    assert unlabelled == []
    assert {d["metadata"]["labels"]["app.kubernetes.io/name"] for d in documents} == {"towline"}
    assert find(documents, "Deployment", "towline-operator")["metadata"]["labels"][
        "app.kubernetes.io/component"] == "operator"


def test_pod_labels_go_on_the_release_pods_and_never_on_their_selectors(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"podLabels": json.dumps(
        {"example.com/cost-center": "ops", "app.kubernetes.io/component": "elsewhere"})})
    for name in DEPLOYMENTS:
        deployment = find(documents, "Deployment", name)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["example.com/cost-center"] == "ops", name
        # The selector still matches the pods: a podLabels key never takes the place of one it selects by.
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(), name


def test_security_contexts_are_overridden_over_the_charts_own(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {
        "operator.podSecurityContext": '{"runAsUser": 10001, "fsGroup": 10001}',
        "operator.containerSecurityContext": '{"runAsUser": 10001, "capabilities": {"drop": ["ALL"], '
                                             '"add": ["NET_BIND_SERVICE"]}}',
    })
    pod = pod_spec(documents, "towline-operator")
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 65532,
                                      "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True, "runAsUser": 10001,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    # The other components keep the chart's.
    assert pod_spec(documents, "towline-ingress")["securityContext"]["runAsUser"] == 65532


@pytest.mark.parametrize(("values", "named"), [
    ({"operator.podSecurityContext": '{"runAsUser": 0}'}, "runAsUser"),
    ({"operator.podSecurityContext": '{"runAsNonRoot": false}'}, "runAsNonRoot"),
    ({"operator.podSecurityContext": '{"seccompProfile": {"type": "Unconfined"}}'}, "type"),
    ({"operator.podSecurityContext": '{"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}'}, "sysctls"),
    ({"ingress.containerSecurityContext": '{"allowPrivilegeEscalation": true}'}, "allowPrivilegeEscalation"),
    ({"ingress.containerSecurityContext": '{"privileged": true}'}, "privileged"),
    ({"archive.containerSecurityContext": '{"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}'}, "add"),
    ({"archive.containerSecurityContext": '{"capabilities": {"drop": ["NET_RAW"]}}'}, "drop"),
    ({"operator.extraVolumes": '[{"name": "root", "hostPath": {"path": "/"}}]'}, "hostPath"),
    ({"operator.extraVolumeMounts": '[{"name": "ca"}]'}, "mountPath"),
    ({"operator.extraEnv": '[{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]'},
     "extraEnv"),
    ({"operator.extraEnv": '[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]'}, "key"),
    ({"operator.podDisruptionBudget": '{"minAvailable": "half"}'}, "minAvailable"),
    ({"global.revisionHistoryLimit": "-1"}, "revisionHistoryLimit"),
    ({"commonLabels": '{"team": "two words"}'}, "two words"),
    ({"serviceMonitor.namespace": "Monitoring"}, "namespace"),
])
def test_values_pod_security_restricted_would_refuse_are_refused_by_name(
    k8s_binaries: BinarySet, values: dict[str, str], named: str,
) -> None:
    result = template(k8s_binaries, values)
    assert result.returncode != 0, f"{values} rendered"
    assert "schema" in result.stderr and named in result.stderr, result.stderr


@pytest.mark.parametrize("component", ["operator", "ingress", "archive"])
def test_extra_volumes_mounts_and_env_from_reach_the_component(k8s_binaries: BinarySet, component: str) -> None:
    env = [{"name": "SSL_CERT_FILE", "value": "/etc/ssl/corporate/ca.crt"},
           {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "egress-proxy", "key": "url"}}}]
    documents = render(k8s_binaries, {f"{component}.extraVolumes": json.dumps([CA_VOLUME]),
                                      f"{component}.extraVolumeMounts": json.dumps([CA_MOUNT]),
                                      f"{component}.extraEnv": json.dumps(env)})
    pod = pod_spec(documents, f"towline-{component}")
    assert CA_VOLUME in pod["volumes"]
    container = pod["containers"][0]
    assert CA_MOUNT in container["volumeMounts"]
    assert container["env"][-2:] == env


def test_the_service_account_is_annotated_or_left_to_the_user(k8s_binaries: BinarySet) -> None:
    annotated = render(k8s_binaries, {"serviceAccount.annotations": '{"eks.amazonaws.com/role-arn": "arn:x"}'})
    account = find(annotated, "ServiceAccount", "towline-operator")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:x"}
    own = render(k8s_binaries, {"serviceAccount.create": "false"})
    assert not [d for d in own if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "towline-operator"]
    # Bound and used all the same.
    assert pod_spec(own, "towline-operator")["serviceAccountName"] == "towline-operator"
    bindings = [d for d in own if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert any(s.get("name") == "towline-operator" for b in bindings for s in b.get("subjects", []))


def test_the_ingress_service_takes_annotations(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"ingress.service.annotations":
                                      '{"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}'})
    service = find(documents, "Service", "towline-ingress")
    assert service["metadata"]["annotations"] == {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
    assert "annotations" not in find(render(k8s_binaries), "Service", "towline-ingress")["metadata"]


def test_revision_history_limit_reaches_every_deployment(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"global.revisionHistoryLimit": "3"})
    assert {name: find(documents, "Deployment", name)["spec"]["revisionHistoryLimit"] for name in DEPLOYMENTS} == \
        dict.fromkeys(DEPLOYMENTS, 3)
    assert not [name for name in DEPLOYMENTS
                if "revisionHistoryLimit" in find(render(k8s_binaries), "Deployment", name)["spec"]]


@pytest.mark.parametrize(("budget", "spec"), [
    ({}, {"maxUnavailable": 1}),
    ({"maxUnavailable": "25%"}, {"maxUnavailable": "25%"}),
    ({"minAvailable": 1}, {"minAvailable": 1}),
    ({"minAvailable": "50%"}, {"minAvailable": "50%"}),
])
def test_disruption_budgets_take_a_number_or_a_percentage_either_way(
    k8s_binaries: BinarySet, budget: dict[str, Any], spec: dict[str, Any],
) -> None:
    documents = render(k8s_binaries, {"operator.podDisruptionBudget": json.dumps(budget),
                                      "ingress.podDisruptionBudget": json.dumps(budget)})
    for name in ("towline-operator", "towline-ingress"):
        found = find(documents, "PodDisruptionBudget", name)["spec"]
        assert {key: found[key] for key in ("maxUnavailable", "minAvailable") if key in found} == spec, name


def test_service_monitors_take_a_namespace_timeout_and_relabelings(k8s_binaries: BinarySet) -> None:
    relabel = [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    drop = [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}]
    documents = render(k8s_binaries, {
        "serviceMonitor.enabled": "true", "serviceMonitor.namespace": "monitoring",
        "serviceMonitor.scrapeTimeout": "20s", "serviceMonitor.relabelings": json.dumps(relabel),
        "serviceMonitor.metricRelabelings": json.dumps(drop),
    }, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    monitors = [d for d in documents if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == 3
    for monitor in monitors:
        assert monitor["metadata"]["namespace"] == "monitoring"
        # Still scraping the release's own namespace.
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["towline-system"]}
        (endpoint,) = monitor["spec"]["endpoints"]
        assert (endpoint["scrapeTimeout"], endpoint["relabelings"], endpoint["metricRelabelings"]) == (
            "20s", relabel, drop)

"""The chart's per-component knobs beyond the operator: every ServiceAccount made or brought and annotated (for
IRSA or workload identity), annotations on every Service the chart makes, and the ui Deployment's and the
`helm test` pod's security contexts, extra volumes and environment. Each bad value is refused by the values
schema naming it, and what Pod Security "restricted" would refuse is refused for these pods too.

Rendered with the pinned helm (`helm template`); nothing here needs a cluster. test_chart_knobs.py holds the same
knobs for the operator, the ingress and the archive; tests/fixtures/chart/every-optional-object.yaml has them all
for kubeconform (test_chart_conformance.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.helmsupport import find, render, template

from towline_dev.binaries import BinarySet

pytestmark = pytest.mark.integration

UI = {"ui.enabled": "true", "ui.url": "https://towline.example.com", "ui.oidc.issuer": "https://id.example.com",
      "ui.oidc.clientId": "towline", "ui.oidc.clientSecret.name": "towline-oidc"}
"""The least that turns the in-cluster web view on."""
ACCOUNTS = {"serviceAccount": "towline-operator", "ingress.serviceAccount": "towline-ingress",
            "archive.serviceAccount": "towline-archive", "ui.serviceAccount": "towline-ui"}
"""Each component's serviceAccount values and the ServiceAccount they name."""
SERVICES = {"operator.service": "towline-operator", "ingress.service": "towline-ingress",
            "ingress.metricsService": "towline-ingress-metrics", "archive.metricsService": "towline-archive-metrics",
            "archive.api.service": "towline-archive", "ui.service": "towline-ui"}
"""Every Service the chart makes, by the values that annotate it."""
ROLE = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/towline"}
CA_VOLUME = {"name": "corporate-ca", "configMap": {"name": "corporate-ca"}}
CA_MOUNT = {"name": "corporate-ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}
ENV = [{"name": "SSL_CERT_FILE", "value": "/etc/ssl/corporate/ca.crt"},
       {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "egress-proxy", "key": "url"}}}]


def pods(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ui Deployment's pod spec and the `helm test` pod's spec."""
    return {"ui": find(documents, "Deployment", "towline-ui")["spec"]["template"]["spec"],
            "tests": find(documents, "Pod", "towline-test-operator")["spec"]}


def bound_accounts(documents: list[dict[str, Any]]) -> set[str]:
    return {subject["name"] for document in documents if document["kind"] in ("ClusterRoleBinding", "RoleBinding")
            for subject in document.get("subjects") or [] if subject.get("kind") == "ServiceAccount"}


@pytest.mark.parametrize(("values", "account"), ACCOUNTS.items())
def test_every_components_service_account_takes_annotations(
    k8s_binaries: BinarySet, values: str, account: str,
) -> None:
    documents = render(k8s_binaries, {**UI, f"{values}.annotations": json.dumps(ROLE)})
    assert find(documents, "ServiceAccount", account)["metadata"]["annotations"] == ROLE
    others = [d["metadata"]["name"] for d in documents if d["kind"] == "ServiceAccount"
              and d["metadata"]["name"] != account and d["metadata"].get("annotations")]
    assert others == [], "annotations of one component's account went to another's"


@pytest.mark.parametrize(("values", "account"), ACCOUNTS.items())
def test_a_brought_service_account_is_not_made_and_is_used_and_bound_all_the_same(
    k8s_binaries: BinarySet, values: str, account: str,
) -> None:
    made = render(k8s_binaries, UI)
    brought = render(k8s_binaries, {**UI, f"{values}.create": "false"})
    accounts = {d["metadata"]["name"] for d in brought if d["kind"] == "ServiceAccount"}
    assert account not in accounts and accounts | {account} == {
        d["metadata"]["name"] for d in made if d["kind"] == "ServiceAccount"}
    used = {d["spec"]["template"]["spec"]["serviceAccountName"] for d in brought if d["kind"] == "Deployment"}
    assert account in used
    assert bound_accounts(brought) == bound_accounts(made)


def test_the_ui_account_stays_without_a_token_whatever_its_values(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {**UI, "ui.serviceAccount.annotations": json.dumps(ROLE)})
    assert find(documents, "ServiceAccount", "towline-ui")["automountServiceAccountToken"] is False
    assert pods(documents)["ui"]["automountServiceAccountToken"] is False
    assert "towline-ui" not in bound_accounts(documents)


@pytest.mark.parametrize(("values", "service"), SERVICES.items())
def test_every_service_the_chart_makes_takes_annotations(k8s_binaries: BinarySet, values: str, service: str) -> None:
    annotations = {"example.com/scrape": "true"}
    documents = render(k8s_binaries, {**UI, f"{values}.annotations": json.dumps(annotations)})
    assert find(documents, "Service", service)["metadata"]["annotations"] == annotations
    annotated = [d["metadata"]["name"] for d in documents
                 if d["kind"] == "Service" and d["metadata"].get("annotations")]
    assert annotated == [service]


def test_every_service_the_chart_makes_has_its_annotation_values(k8s_binaries: BinarySet) -> None:
    # A Service added later without its knob fails here.
    services = {d["metadata"]["name"] for d in render(k8s_binaries, UI) if d["kind"] == "Service"}
    assert services == set(SERVICES.values())


@pytest.mark.parametrize("pod", ["ui", "tests"])
def test_the_ui_and_test_pods_take_extra_volumes_mounts_and_env(k8s_binaries: BinarySet, pod: str) -> None:
    documents = render(k8s_binaries, {**UI, f"{pod}.extraVolumes": json.dumps([CA_VOLUME]),
                                      f"{pod}.extraVolumeMounts": json.dumps([CA_MOUNT]),
                                      f"{pod}.extraEnv": json.dumps(ENV)})
    spec = pods(documents)[pod]
    assert CA_VOLUME in spec["volumes"]
    (container,) = spec["containers"]
    assert CA_MOUNT in container["volumeMounts"]
    assert container["env"][-2:] == ENV


@pytest.mark.parametrize("pod", ["ui", "tests"])
def test_the_ui_and_test_pods_security_contexts_are_overridden_over_the_charts_own(
    k8s_binaries: BinarySet, pod: str,
) -> None:
    documents = render(k8s_binaries, {**UI, f"{pod}.podSecurityContext": '{"runAsUser": 10001, "fsGroup": 10001}',
                                      f"{pod}.containerSecurityContext": '{"runAsUser": 10001}'})
    spec = pods(documents)[pod]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 65532,
                                       "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True, "runAsUser": 10001,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    # The other pod keeps the chart's.
    other = pods(documents)["tests" if pod == "ui" else "ui"]
    assert other["securityContext"]["runAsUser"] == 65532


def test_the_ui_pods_take_pod_labels_and_global_pull_secrets(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {**UI, "podLabels": '{"example.com/cost-center": "ops"}',
                                      "global.imagePullSecrets": '[{"name": "mirror"}]',
                                      "global.revisionHistoryLimit": "3"})
    deployment = find(documents, "Deployment", "towline-ui")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["example.com/cost-center"] == "ops"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "mirror"}]
    assert deployment["spec"]["revisionHistoryLimit"] == 3


@pytest.mark.parametrize(("values", "named"), [
    # ServiceAccounts
    ({"ingress.serviceAccount.create": "yes"}, "create"),
    ({"archive.serviceAccount.annotations": '{"eks.amazonaws.com/role-arn": 1}'}, "role-arn"),
    ({"ui.serviceAccount.annotations": '["arn"]'}, "annotations"),
    ({"ui.serviceAccount.automount": "true"}, "automount"),
    # Service annotations
    ({"operator.service.annotations": '{"scrape-port": 9090}'}, "scrape-port"),
    ({"ingress.metricsService.annotations": '"internal"'}, "annotations"),
    ({"archive.metricsService.type": "LoadBalancer"}, "type"),
    ({"archive.api.service.annotations": '{"a": true}'}, "annotations"),
    ({"ui.service.annotations": '{"weight": 1.5}'}, "weight"),
    # The ui's and the test pod's security contexts, within Pod Security "restricted"
    ({"ui.podSecurityContext": '{"runAsUser": 0}'}, "runAsUser"),
    ({"ui.podSecurityContext": '{"seccompProfile": {"type": "Unconfined"}}'}, "type"),
    ({"ui.containerSecurityContext": '{"allowPrivilegeEscalation": true}'}, "allowPrivilegeEscalation"),
    ({"ui.containerSecurityContext": '{"capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}'}, "capabilities/add"),
    ({"tests.podSecurityContext": '{"runAsNonRoot": false}'}, "runAsNonRoot"),
    ({"tests.containerSecurityContext": '{"privileged": true}'}, "privileged"),
    ({"tests.containerSecurityContext": '{"readOnlyRootFilesystem": "no"}'}, "readOnlyRootFilesystem"),
    # Their volumes, mounts and environment
    ({"ui.extraVolumes": '[{"name": "root", "hostPath": {"path": "/"}}]'}, "hostPath"),
    ({"tests.extraVolumes": '[{"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}]'}, "hostPath"),
    ({"ui.extraVolumeMounts": '[{"name": "ca"}]'}, "mountPath"),
    ({"tests.extraVolumeMounts": '[{"mountPath": "/etc/ssl/corporate"}]'}, "name"),
    ({"tests.extraEnv": '[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]'}, "key"),
    ({"tests.extraEnv": '[{"value": "1"}]'}, "name"),
])
def test_bad_component_values_are_refused_by_name(
    k8s_binaries: BinarySet, values: dict[str, str], named: str,
) -> None:
    result = template(k8s_binaries, {**UI, **values})
    assert result.returncode != 0, f"{values} rendered"
    assert "schema" in result.stderr and named in result.stderr, result.stderr

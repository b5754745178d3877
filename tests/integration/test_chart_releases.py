"""Two releases of the chart on one cluster: their objects' names, and where their admission policies apply.

Rendered with the pinned helm (`helm template`); nothing here needs a cluster. What two installed
releases then do side by side is proved on a real node (helm/test_helm_two_releases.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.helmsupport import find, helm
from tests.yamlread import yaml_documents

from towline_dev.binaries import BinarySet
from towline_dev.release import CHART, name_prefix, set_args
from towline_dev.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.integration

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                  "APIService"}
ARCHIVE_API_SERVICE = "v1alpha1.archive.towline.dev"
"""The one name no release prefixes: Kubernetes names an APIService after its version and group, so a cluster serves
the archive's read API from one release (the others set archive.api.enabled=false; docs/archive.md)."""

TODAYS_CLUSTER_NAMES = {
    "ClusterRole": {
        "towline-ingress", "towline-operator", "towline-operator-cluster-step-types", "towline-operator-discovery",
        "towline-viewer", "towline-runner", "towline-log-reader", "towline-approver", "towline-step-type-author",
        "towline-workflow-author", "towline-aggregate-to-view", "towline-aggregate-to-edit", "towline-admin",
        "towline-archive", "towline-archive-auth", "towline-archive-readers"},
    "ClusterRoleBinding": {
        "towline-ingress", "towline-operator", "towline-operator-cluster-step-types", "towline-operator-discovery",
        "towline-archive", "towline-archive-auth", "towline-archive-readers"},
    "ValidatingAdmissionPolicy": {
        "towline-approval-decisions", "towline-run-requester", "towline-trigger-runs", "towline-ingress-runs",
        "towline-ingress-dead-letters", "towline-dead-letters", "towline-run-updates", "towline-nesting-depth",
        "towline-workflow-credentials",
        "towline-step-objects", "towline-step-pod-access", "towline-step-type-images",
        "towline-step-type-credentials", "towline-step-type-schemas", "towline-archive-releases"},
    "APIService": {ARCHIVE_API_SERVICE},
}
"""The cluster-scoped names release `towline` (the README's, `make dev`'s) has always had: people bind
towline-runner and friends by these names, so they must not change."""

SCOPED_POLICIES = {"approval-decisions", "run-requester", "trigger-runs", "run-updates", "workflow-credentials",
                   "step-type-images", "step-type-credentials", "dead-letters"}
"""Policies that hold everyone in a namespace to this release's operator and ingress (or its values):
bound only to its watchNamespaces, so that another release's operator may act in its own."""

EVERYWHERE_POLICIES = {"ingress-runs", "ingress-dead-letters", "step-objects", "nesting-depth", "step-pod-access",
                       "step-type-schemas", "archive-releases"}
"""Policies that only restrict this release's own identities, or hold everyone to the same rule
whatever the release: bound cluster-wide, which refuses nobody another release trusts. step-objects also
holds everyone else to "hands off step objects", in the watchNamespaces its rule names (one policy, so the API
server converts a Job or pod once for all its rules: docs/benchmarks.md)."""


def render_release(binaries: BinarySet, release: str, namespace: str,
                   values: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The release's own objects. Its CustomResourceDefinitions are left out (`crds.enabled=false`): they are the
    cluster's, named by their group whatever the release, and one release manages them while every other sets
    crds.enabled=false (docs/configuration.md); tests/unit/devtools/test_chart_crds.py covers the template."""
    result = helm(binaries, "template", release, str(CHART), "--namespace", namespace,
                  "--kube-version", KUBERNETES_VERSION, *set_args({"crds.enabled": "false", **(values or {})}))
    assert result.returncode == 0, result.stderr
    return yaml_documents(result.stdout)


def keys(documents: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of each object; cluster-scoped objects have namespace ""."""
    return [(d["kind"], "" if d["kind"] in CLUSTER_SCOPED else d["metadata"]["namespace"], d["metadata"]["name"])
            for d in documents]


def test_release_towline_keeps_every_name_it_had(k8s_binaries: BinarySet) -> None:
    documents = render_release(k8s_binaries, "towline", "towline-system")
    names: dict[str, set[str]] = {}
    for kind, namespace, name in keys(documents):
        if not namespace:
            names.setdefault(kind, set()).add(name)
    assert {kind: found for kind, found in names.items() if kind != "ValidatingAdmissionPolicyBinding"} == \
        TODAYS_CLUSTER_NAMES
    assert names["ValidatingAdmissionPolicyBinding"] == TODAYS_CLUSTER_NAMES["ValidatingAdmissionPolicy"]
    for kind in ("Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget"):
        assert {name for k, _, name in keys(documents) if k == kind} >= {"towline-operator", "towline-ingress"}, kind
    assert find(documents, "Pod", "towline-test-operator")


@pytest.mark.parametrize(("release", "values", "prefix"), [
    ("towline", {}, "towline"),
    ("towline-blue", {}, "towline-blue"),
    ("team-a", {}, "team-a-towline"),
    ("team-a", {"nameOverride": "flow"}, "team-a-flow"),
    ("team-a", {"fullnameOverride": "wf"}, "wf"),
])
def test_names_follow_the_helm_convention(
    k8s_binaries: BinarySet, release: str, values: dict[str, str], prefix: str
) -> None:
    documents = render_release(k8s_binaries, release, "ns", values)
    # ServiceAccounts are named by their own values (serviceAccount.name, ingress.serviceAccount.name).
    # The archive's APIService is named by Kubernetes' rule (version.group).
    names = {d["metadata"]["name"] for d in documents if d["kind"] not in ("ServiceAccount", "APIService")}
    assert all(name.startswith(f"{prefix}-") for name in names), sorted(names)
    assert find(documents, "ValidatingAdmissionPolicy", f"{prefix}-run-requester")
    if not values:  # the tests' own copy of the convention (towline_dev.release.name_prefix) agrees
        assert name_prefix(release) == prefix
    # The labels that select Towline's pods stay what tools look for, whatever the names.
    operator = find(documents, "Deployment", f"{prefix}-operator")
    assert operator["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "towline", "app.kubernetes.io/component": "operator"}


def test_a_name_prefix_too_long_for_a_service_name_is_refused_naming_the_fix(k8s_binaries: BinarySet) -> None:
    result = helm(k8s_binaries, "template", "a" * 45, str(CHART), "--namespace", "ns",
                  "--kube-version", KUBERNETES_VERSION)
    assert result.returncode != 0
    assert "longer than 47 characters" in result.stderr and "fullnameOverride" in result.stderr, result.stderr


def test_two_releases_share_no_name(k8s_binaries: BinarySet) -> None:
    team_a = render_release(k8s_binaries, "team-a", "team-a-system", {"watchNamespaces": '["team-a"]'})
    team_b = render_release(k8s_binaries, "team-b", "team-b-system", {"watchNamespaces": '["team-b"]'})
    assert len(set(keys(team_a))) == len(team_a) and len(set(keys(team_b))) == len(team_b)
    # Only the archive's read API, which one release serves (the install of a second one is refused, naming the
    # first: helm/test_helm_two_releases.py); with archive.api.enabled=false the second shares no name at all.
    assert set(keys(team_a)) & set(keys(team_b)) == {("APIService", "", ARCHIVE_API_SERVICE)}
    team_b = render_release(k8s_binaries, "team-b", "team-b-system",
                            {"watchNamespaces": '["team-b"]', "archive.api.enabled": "false"})
    assert set(keys(team_a)) & set(keys(team_b)) == set()
    # Both hold namespaced objects in `default` (reading where the API server is): distinct names there too.
    assert {n for _, ns, n in keys(team_a) if ns == "default"} == {"team-a-towline-operator-api-server"}


def test_every_reference_names_an_object_of_the_same_release(k8s_binaries: BinarySet) -> None:
    documents = render_release(k8s_binaries, "team-a", "team-a-system", {"watchNamespaces": '["team-a"]'})
    present = set(keys(documents))
    for document in documents:
        kind, metadata = document["kind"], document["metadata"]
        if kind == "ValidatingAdmissionPolicyBinding":
            assert ("ValidatingAdmissionPolicy", "", document["spec"]["policyName"]) in present
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = document["roleRef"]
            if (ref["kind"], ref["name"]) == ("Role", "extension-apiserver-authentication-reader"):
                continue  # the API server's own Role, which every aggregated API (the archive's) binds
            namespace = "" if ref["kind"] == "ClusterRole" else metadata["namespace"]
            assert (ref["kind"], namespace, ref["name"]) in present, document
    checker = find(documents, "Pod", "team-a-towline-test-operator")
    script = checker["spec"]["containers"][0]["command"][-1]
    assert "http://team-a-towline-operator.team-a-system.svc" in script
    assert find(documents, "Service", "team-a-towline-operator")


def test_policies_trusting_the_release_apply_only_to_its_watch_namespaces(k8s_binaries: BinarySet) -> None:
    def scopes(documents: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
        return {d["metadata"]["name"].removeprefix(f"{prefix}-"): d["spec"].get("matchResources")
                for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding"}

    scoped = scopes(render_release(k8s_binaries, "team-a", "team-a-system",
                                   {"watchNamespaces": '["team-a", "team-a-ci"]'}), "team-a-towline")
    assert set(scoped) == SCOPED_POLICIES | EVERYWHERE_POLICIES
    for policy in SCOPED_POLICIES:
        assert scoped[policy] == {"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-a-ci"]}]}}, policy
    for policy in EVERYWHERE_POLICIES:
        assert scoped[policy] is None, policy
    step_objects = next(d for d in render_release(k8s_binaries, "team-a", "team-a-system",
                                                  {"watchNamespaces": '["team-a", "team-a-ci"]'})
                        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("-step-objects"))
    (condition,) = step_objects["spec"]["matchConditions"]
    assert 'request.namespace in ["team-a","team-a-ci"] &&' in condition["expression"], condition
    # Watching every namespace: every policy applies everywhere, as it always did.
    everywhere = scopes(render_release(k8s_binaries, "towline", "towline-system"), "towline")
    assert set(everywhere) == SCOPED_POLICIES | EVERYWHERE_POLICIES
    assert all(scope is None for scope in everywhere.values()), everywhere

"""The tests' reads (`tests.integration.reads`) see what `kubectl get` sees, for every name the tests use.

The waits and assertions of the integration tests read through it; a name resolved to the wrong
resource, or a list missing what kubectl lists, would make them wait on or assert about nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.reads import ReadError, read_list, read_object

from towline_dev.controlplane import ControlPlane

pytestmark = pytest.mark.integration

NAMES = {
    "configmaps": "ConfigMap", "configmap": "ConfigMap", "cm": "ConfigMap", "ConfigMap": "ConfigMap",
    "workflows.towline.dev": "Workflow", "workflowruns.towline.dev": "WorkflowRun", "workflowrun": "WorkflowRun",
    "approvals.towline.dev": "Approval", "jobs": "Job", "networkpolicies": "NetworkPolicy", "pods": "Pod",
    "services": "Service", "lease": "Lease", "events": "Event", "endpointslices.discovery.k8s.io": "EndpointSlice",
}


def kubectl_json(cluster: ControlPlane, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def test_reads_resolve_names_as_kubectl_and_return_what_it_returns(towline_installed: ControlPlane,
                                                                   namespace: str) -> None:
    cluster, ns = towline_installed, namespace
    cluster.kubectl("create", "configmap", "settings", "-n", ns, "--from-literal=a=1")
    cluster.kubectl("label", "configmap", "settings", "-n", ns, "tier=one")
    cluster.kubectl("create", "configmap", "other", "-n", ns, "--from-literal=b=2")
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "hello", "namespace": ns},
        "spec": {"steps": [{"id": "a", "action": "data.transform", "with": {"data": {}, "fields": {}}}]}}))

    for name, kind in NAMES.items():
        ours = read_list(cluster, name, ns)
        theirs = kubectl_json(cluster, name, "-n", ns)["items"]
        assert {(o["kind"], o["metadata"]["name"]) for o in ours} == {
            (o["kind"], o["metadata"]["name"]) for o in theirs}, name
        assert all(o["kind"] == kind for o in ours), name

    # Whole objects alike (no one else writes ConfigMaps here; the operator writes the Workflow's status).
    assert read_object(cluster, "cm", "settings", ns) == kubectl_json(cluster, "configmap", "settings", "-n", ns)
    assert read_list(cluster, "configmaps", ns) == kubectl_json(cluster, "configmaps", "-n", ns)["items"]
    assert [o["metadata"]["name"] for o in read_list(cluster, "configmaps", ns, "tier=one")] == ["settings"]
    assert read_object(cluster, "configmap", "absent", ns) is None
    assert read_object(cluster, "configmap", "settings", "another-namespace") is None
    with pytest.raises(ReadError, match="no resource named 'flumps'"):
        read_list(cluster, "flumps", ns)

"""Fixtures of the Helm tests (install, upgrade, uninstall and `helm test` of the chart), on a real API server.

The release lives in a control plane of its own (started for this module), because the
session's control plane holds the chart's cluster-scoped objects applied by kubectl,
which Helm will not adopt. With `TOWLINE_TEST_KUBECONFIG` the module uses that cluster.

The tests that need running pods (`helm test`, the README's approval walkthrough against
the Helm-installed operator) install the release on the session's real node instead
(`real_node_with_images`: the operator and runner images loaded into its containerd), where
the operator, the ingress and the step Jobs run as real containers; meanwhile the session's
own operator is stopped and its kubectl-applied chart objects removed (`chart_left_to_helm`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.helm.release import (
    Cluster,
    install,
    ready_nodes,
    uninstall,
)

from towline_dev.binaries import BinarySet
from towline_dev.controlplane import ControlPlane
from towline_dev.existing import ExistingCluster
from towline_dev.node.realnode import NodeCluster
from towline_dev.release import NAMESPACE, RELEASE, api_server_egress, wait_rolled_out


@pytest.fixture(scope="module")
def helm_cluster(k8s_binaries: BinarySet, existing_cluster: ExistingCluster | None) -> Iterator[Cluster]:
    if existing_cluster is not None:
        yield existing_cluster
        return
    plane = ControlPlane(k8s_binaries, install_signal_handlers=False).start()
    try:
        yield plane
    finally:
        plane.remove_state()


@pytest.fixture(scope="module")
def installed(helm_cluster: Cluster) -> Cluster:
    # Pod Security "restricted" enforced where the chart installs: its pods must pass it.
    helm_cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    helm_cluster.kubectl("label", "namespace", NAMESPACE, "--overwrite",
                         "pod-security.kubernetes.io/enforce=restricted")
    uninstall(helm_cluster, RELEASE, NAMESPACE)  # a test that ran first may have left it installed
    install(helm_cluster, RELEASE, NAMESPACE, {})
    return helm_cluster


@pytest.fixture(scope="module")
def node_cluster(request: pytest.FixtureRequest, existing_cluster: ExistingCluster | None) -> Cluster:
    """Where the operator's pods can run: the existing cluster if it has a Ready node, else the session's
    local real node with the images loaded into its containerd. (Not `helm_cluster`: a control plane of
    the module's own has no node, and starting one only to find that out cost each module seconds.)"""
    if existing_cluster is not None and ready_nodes(existing_cluster):
        return existing_cluster
    if existing_cluster is not None:
        pytest.skip("needs a Ready node to run the operator's pods, and TOWLINE_TEST_KUBECONFIG's cluster has none")
    if os.geteuid() != 0:
        pytest.skip("needs a Ready node to run the operator's pods: the local real node needs root; or run it "
                    "against a cluster with a node and the images: TOWLINE_TEST_KUBECONFIG=<kubeconfig> "
                    "TOWLINE_TEST_IMAGE_REPOSITORY=<registry>/towline TOWLINE_TEST_IMAGE_TAG=<tag> "
                    "TOWLINE_TEST_RUNNER_IMAGE=<registry>/towline-runner:<tag> "
                    "python -m pytest tests/integration/helm")
    real: NodeCluster = request.getfixturevalue("real_node_with_images")
    assert real.plane is not None
    return request.getfixturevalue("chart_left_to_helm")  # the session's plane, its operator stopped


@pytest.fixture
def running_release(node_cluster: Cluster) -> Iterator[Cluster]:
    """The chart installed and its Deployments rolled out (pods running on a real node), for one test."""
    yield from _running_release(node_cluster)


@pytest.fixture(scope="module")
def module_running_release(node_cluster: Cluster) -> Iterator[Cluster]:
    """`running_release`, installed once for the module's tests that only use the release (no upgrade,
    no uninstall, no change of values): each works in a namespace of its own."""
    yield from _running_release(node_cluster)


def _running_release(cluster: Cluster) -> Iterator[Cluster]:
    uninstall(cluster, RELEASE, NAMESPACE)
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    cluster.kubectl("label", "namespace", NAMESPACE, "--overwrite", "pod-security.kubernetes.io/enforce=restricted")
    install(cluster, RELEASE, NAMESPACE, api_server_egress(cluster))
    try:
        wait_rolled_out(cluster)
        yield cluster
    finally:
        uninstall(cluster, RELEASE, NAMESPACE)


HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test here that installs the chart on the shared node (`node_cluster`: it stops the session operator and
    removes the chart objects every worker relies on) is exclusive: `make test` runs it after the concurrent
    part. One that only uses a control plane of its own (`helm_cluster`, `installed`: loopback, its own ports)
    runs in the concurrent part beside the others."""
    for item in items:
        if HERE in Path(str(item.path)).parents and "node_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.exclusive)

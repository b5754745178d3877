"""`ControlPlane.restart_component`: etcd and the API server stop and start again with the same
flags and state, and the rest of the control plane carries on (what the chaos scenario relies on)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.integration.support import wait_for

from towline_dev.binaries import BinarySet
from towline_dev.controlplane import ControlPlane

# Concurrent-safe: it restarts the components of a control plane of its own (own ports, own state), never the
# shared one the other workers use.
pytestmark = [pytest.mark.integration, pytest.mark.local_only]


@pytest.fixture(scope="module")
def plane(k8s_binaries: BinarySet) -> Iterator[ControlPlane]:
    """A control plane of its own: restarting the session's would disturb the other tests' clients."""
    own = ControlPlane(k8s_binaries, install_signal_handlers=False).start()
    yield own
    own.remove_state()


def test_etcd_restarts_with_its_data(plane: ControlPlane) -> None:
    plane.kubectl("create", "configmap", "before-etcd", "--from-literal=k=v")
    before = plane.pids()
    plane.restart_component("etcd", down_seconds=1)
    assert plane.pids()["etcd"] != before["etcd"]
    assert plane.pids()["kube-apiserver"] == before["kube-apiserver"], "the API server reconnected, not restarted"
    assert plane.kubectl("get", "configmap", "before-etcd", "-o", "jsonpath={.data.k}").stdout == "v"
    plane.kubectl("create", "configmap", "after-etcd")
    assert plane.is_running()


def test_the_api_server_restarts_on_its_address_with_the_same_credentials(plane: ControlPlane) -> None:
    server, before = plane.server, plane.pids()
    plane.kubectl("create", "configmap", "before-apiserver")
    plane.restart_component("kube-apiserver")
    assert plane.server == server and plane.pids()["kube-apiserver"] != before["kube-apiserver"]
    assert plane.kubectl("get", "configmap", "before-apiserver", "-o", "name").stdout.strip() == \
        "configmap/before-apiserver"
    # Another person's token from the same kubeconfig still authenticates (RBAC grants alice nothing).
    assert plane.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", user="alice").stdout == \
        "alice"
    assert plane.is_running(), "the controller manager carried on through the API server's absence"


def test_the_controller_manager_still_works_after_the_restarts(plane: ControlPlane) -> None:
    plane.kubectl("create", "namespace", "after-restarts")
    # The ServiceAccount controller makes the new namespace's default ServiceAccount.
    wait_for("ServiceAccount after-restarts/default", lambda: plane.kubectl(
        "get", "serviceaccount", "default", "-n", "after-restarts", check=False).returncode == 0, timeout=60)


def test_restarting_a_component_it_does_not_run_names_the_ones_it_does(plane: ControlPlane) -> None:
    with pytest.raises(ValueError, match="etcd, kube-apiserver, kube-controller-manager"):
        plane.restart_component("kubelet")

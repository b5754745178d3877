"""Shared fixtures: a real local control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) with a real node (kubelet, containerd, CNI, kube-proxy, CoreDNS, kube-router), the
operator and runner images loaded into it, started once per session on first use (needs root).

With ``TOWLINE_TEST_KUBECONFIG=path`` the tests use that existing cluster instead (like
envtest's UseExistingCluster): nothing is started, alice/bob/carol are the kubeconfig's
identity impersonating them, and tests that need local-only parts skip, saying so.

Unit tests never touch these fixtures, so they never start (or build) anything.
The first integration test of a machine may build the Kubernetes binaries
(about 10-40 minutes depending on the machine, printed as it goes); later sessions start in seconds.

When a test that used the cluster fails, the control plane's and the node's
logs (the containers' logs among them) and a dump of the nodes, pods, Jobs,
NetworkPolicies and events (objects.yaml) are copied to
``$TOWLINE_TEST_LOGS/<test>/`` (default: ``<tmp>/towline-test-logs/<test>/``) and
the path is printed with the failure.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from tests import durations
from tests.keptlogs import kept_logs_root
from tests.workers import IN_THE_WORLDS, SHARED_NODE, longest_first, namespace_prefix, worker_id
from towline_dev.binaries import BinarySet, find_binaries
from towline_dev.clients import KubeClients, clients_from_kubeconfig
from towline_dev.controlplane import ControlPlane
from towline_dev.existing import ENVIRONMENT_VARIABLE, ExistingCluster, existing_cluster_from_environment
from towline_dev.images import ensure_images
from towline_dev.node.realnode import NodeCluster

_NODE_CLUSTER: NodeCluster | None = None
"""The session's control plane with a real node, for the same hook."""


def _progress(message: str) -> None:
    # Straight to the terminal: a first-time build takes long and must not look hung.
    print(f"[towline tests] {message}", file=sys.__stderr__, flush=True)


@pytest.fixture(scope="session")
def k8s_binaries() -> BinarySet:
    """The pinned kubectl and helm (built once if missing), without starting a cluster."""
    return find_binaries(progress=_progress)


@pytest.fixture(scope="session")
def existing_cluster() -> ExistingCluster | None:
    """The cluster `TOWLINE_TEST_KUBECONFIG` names (used instead of the local one), else None."""
    if not os.environ.get(ENVIRONMENT_VARIABLE):
        return None
    return existing_cluster_from_environment(find_binaries(progress=_progress))


@pytest.fixture(scope="session")
def real_node() -> Iterator[NodeCluster]:
    """A control plane of its own with a real node (kubelet, containerd, CNI, kube-proxy,
    kube-scheduler, kube-router for NetworkPolicy, CoreDNS), for the whole session.

    Needs root; the first use on a machine installs the node's Debian packages and builds
    its binaries (printed as it goes). `.plane` is the ControlPlane, `.node` the RealNode.
    """
    global _NODE_CLUSTER  # noqa: PLW0603 - the failure hook needs it
    if os.geteuid() != 0:
        pytest.skip("the real node needs root")
    if os.environ.get(SHARED_NODE):
        # `python -m tests.suite` started it for every worker, and stops it after them.
        _NODE_CLUSTER = NodeCluster.attach(Path(os.environ[SHARED_NODE]))
        yield _NODE_CLUSTER
        _NODE_CLUSTER = None
        return
    cluster = NodeCluster(progress=_progress).start()
    assert cluster.node is not None
    _progress(f"real node Ready in {cluster.node.startup_seconds:.1f} s ({cluster.startup_seconds:.1f} s "
              f"with the control plane; state: {cluster.state_dir})")
    _NODE_CLUSTER = cluster
    try:
        yield cluster
    finally:
        _NODE_CLUSTER = None
        cluster.stop()


@pytest.fixture(scope="session")
def real_node_with_images(real_node: NodeCluster) -> NodeCluster:
    """`real_node` with the operator and runner images of the current sources loaded into its
    containerd (built first if the cache lacks them, printed as it goes)."""
    assert real_node.node is not None
    loaded = set(real_node.node.images())
    for reference, archive in ensure_images(_progress).items():
        if reference not in loaded:
            real_node.node.load_image(archive)
    return real_node


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, existing_cluster: ExistingCluster | None) -> ControlPlane:
    """The running control plane: `.kubectl(...)`, `.kubeconfig`, `.env()`, `.server`.

    Locally, the plane of `real_node_with_images` (one control plane and node per session).
    With `TOWLINE_TEST_KUBECONFIG`, the existing cluster it names (and its people impersonated).
    """
    if existing_cluster is not None:
        return existing_cluster
    cluster: NodeCluster = request.getfixturevalue("real_node_with_images")
    assert cluster.plane is not None
    return cluster.plane


def _clients(plane: ControlPlane, user: str) -> Iterator[KubeClients]:
    clients = clients_from_kubeconfig(plane.kubeconfig, context=user)
    yield clients
    clients.close()


@pytest.fixture(scope="session")
def admin_client(control_plane: ControlPlane) -> Iterator[KubeClients]:
    """Typed API clients as `admin` (system:masters)."""
    yield from _clients(control_plane, "admin")


@pytest.fixture(scope="session")
def alice_client(control_plane: ControlPlane) -> Iterator[KubeClients]:
    """Typed API clients as `alice` (group team-a); RBAC grants her nothing by default."""
    yield from _clients(control_plane, "alice")


@pytest.fixture(scope="session")
def bob_client(control_plane: ControlPlane) -> Iterator[KubeClients]:
    """Typed API clients as `bob` (groups team-b, approvers); RBAC grants him nothing by default."""
    yield from _clients(control_plane, "bob")


@pytest.fixture(scope="session")
def carol_client(control_plane: ControlPlane) -> Iterator[KubeClients]:
    """Typed API clients as `carol` (group team-a); RBAC grants her nothing by default."""
    yield from _clients(control_plane, "carol")


def _namespace_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:36].strip("-")
    return f"{namespace_prefix()}{stem}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(request: pytest.FixtureRequest, admin_client: KubeClients) -> Iterator[str]:
    """A fresh namespace per test (its default ServiceAccount exists); deleted afterwards."""
    yield from _fresh_namespace(admin_client, _namespace_name(request.node.name))


@pytest.fixture(scope="module")
def dry_run_namespace(request: pytest.FixtureRequest, admin_client: KubeClients) -> Iterator[str]:
    """One namespace for a module's tests that only send server-side dry runs into it (admission decides in full,
    nothing stays, so no test sees another's), made once: each namespace's deletion has the namespace controller
    go through every resource type, and the attack tests send dozens of such dry runs."""
    yield from _fresh_namespace(admin_client, _namespace_name(request.module.__name__.rpartition(".")[2]))


def _fresh_namespace(admin_client: KubeClients, name: str) -> Iterator[str]:
    """Namespace `name`, once its default ServiceAccount exists; deleted afterwards."""
    admin_client.core.create_namespace({"metadata": {"name": name, "labels": {"towline.dev/test": "true"}}})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin_client.core.read_namespaced_service_account("default", name)
            break
        except ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield name
    try:
        admin_client.core.delete_namespace(name)
    except ApiException as error:
        if error.status != 404:
            raise


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as from a terminal, however the suite was started: a non-interactive shell's `make test &` (as a
    CI job may run it) starts it with SIGINT ignored, and every process the tests start would inherit that, so
    the tests that press Ctrl-C on the plugin or `make dev` would wait for a process that cannot hear it. A
    handler (unlike an ignored signal) is not inherited: the processes started from here get the default.

    In a part of `python -m tests.suite`, each file's seconds are summed for the next run's order (tests.durations)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    out = os.environ.get(durations.DURATIONS_OUT)
    if out and not worker_id():  # a worker's reports reach its controller: counted there once
        config.pluginmanager.register(durations.FileSeconds(Path(out)), "towline-file-seconds")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Before `-m` deselects (a conftest's hook runs before pytest's own): the suite selects by this marker.
    paths = [Path(str(item.path)).relative_to(config.rootpath).as_posix() for item in items]
    world_of = {path: mark for mark, moved in IN_THE_WORLDS.items() for path in moved}
    for item, path in zip(items, paths, strict=True):
        if path in world_of:
            item.add_marker(world_of[path])
    if worker_id() and not config.pluginmanager.has_plugin("randomly"):
        # The concurrent part's workers, in the suite's own order (not --random-order): longest files first.
        items[:] = [items[index] for index in longest_first(paths, durations.seen())]
    if not os.environ.get(ENVIRONMENT_VARIABLE):
        return
    reason = pytest.mark.skip(reason=f"tests the local control plane's own parts; {ENVIRONMENT_VARIABLE} "
                                     "names an existing cluster")
    for item in items:
        if item.get_closest_marker("local_only"):
            item.add_marker(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    node_cluster = _NODE_CLUSTER
    if report.failed and node_cluster is not None and "real_node" in getattr(item, "fixturenames", ()):
        _keep_node_logs(item, report, node_cluster)
    if report.failed and call.when == "call":
        _show_operator_log(item, report)


OPERATOR_LOG_LINES = 40
"""How many of the operator's log lines a failed test shows: those of its namespace, warnings and errors. The kept
logs stay on the machine that ran the suite; these reach CI's output."""


def _show_operator_log(item: pytest.Item, report: pytest.TestReport) -> None:
    funcargs = getattr(item, "funcargs", {})
    operator, namespace = funcargs.get("towline_operator"), funcargs.get("team_namespace") or funcargs.get("namespace")
    if operator is None or not hasattr(operator, "log_text"):
        return
    wanted = [line[:400] for line in str(operator.log_text()).splitlines()
              if (namespace and str(namespace) in line) or '"level": "warning"' in line or '"level": "error"' in line]
    if wanted:
        report.sections.append((f"operator log ({namespace}, warnings, errors; last {OPERATOR_LOG_LINES})",
                                "\n".join(wanted[-OPERATOR_LOG_LINES:])))


def _keep_node_logs(item: pytest.Item, report: pytest.TestReport, cluster: NodeCluster) -> None:
    destination = kept_logs_root() / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)
    shutil.rmtree(destination, ignore_errors=True)
    if cluster.plane is not None:
        cluster.plane.copy_logs(destination / "control-plane")
        snapshot = cluster.plane.kubectl("get", "nodes,pods,jobs,networkpolicies,events", "-A", "-o", "yaml",
                                         check=False, timeout=30)
        (destination / "objects.yaml").write_text(snapshot.stdout or snapshot.stderr)
    if cluster.node is not None:
        cluster.node.copy_logs(destination / "node")
    report.sections.append(("towline logs", f"control plane, node and pod logs kept in {destination}"))

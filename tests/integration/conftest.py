"""Integration fixtures: Towline's CRDs, the chart's RBAC and admission policies, and one operator.

Defined here, once, so every module shares the same session fixtures: a fixture imported into
several modules would be instantiated once per module, and two operators with one identity
would both believe they hold the Lease.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.oidcsupport import whoami
from tests.integration.replicas import in_place_of
from tests.integration.support import TEST_SERVER_ADDRESS, TEST_SERVER_ALIAS, bind_role, get, wait_for
from tests.keptlogs import kept_logs_root
from tests.workers import SHARED_NODE, namespace_prefix, operator_scope, worker_id

from towline_dev.controlplane import ControlPlane
from towline_dev.existing import ENVIRONMENT_VARIABLE, ExistingCluster
from towline_dev.fakeclock import MovableClock
from towline_dev.idp.flow import sign_in
from towline_dev.idp.issuer import TEST_REDIRECT_URI
from towline_dev.idp.provider import IdentityProvider, OAuthClient
from towline_dev.install import (
    OPERATOR_NAMESPACE,
    SERVICE_ACCOUNT,
    OperatorProcess,
    StepPods,
    cluster_step_pods,
    install_chart,
    install_crds,
    operator_kubeconfig,
    render_chart,
)
from towline_dev.node.probehosts import TestHostNetwork
from towline_dev.release import adopt_crds

_SESSION: dict[str, OperatorProcess] = {}
"""The session operator once started, for fixtures that must stop it without starting it."""


def free_port() -> int:
    """A loopback port nobody listens on now (the operator's /metrics; tests scrape it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def crds_installed(control_plane: ControlPlane) -> ControlPlane:
    """`crds/*.yaml` applied (server-side) and Established; the control plane, for chaining.
    On the suite's shared node the suite applied them once, before any worker started."""
    if not os.environ.get(SHARED_NODE):
        install_crds(control_plane)
    return control_plane


@pytest.fixture(scope="session")
def towline_installed(crds_installed: ControlPlane) -> ControlPlane:
    """CRDs plus the chart's RBAC, ServiceAccount and admission policies (the suite's, on its shared node)."""
    if not os.environ.get(SHARED_NODE):
        install_chart(crds_installed)
    return crds_installed


def code_steps_for_code_tests() -> dict[str, str]:
    """Code steps on only in the namespaces of tests named test_code_*: every other test's namespace has them off."""
    return {"TOWLINE_CODE_STEPS": "true", "TOWLINE_CODE_STEP_NAMESPACES": f"{namespace_prefix()}test-code-*"}


@pytest.fixture(scope="session")
def towline_operator(
    towline_installed: ControlPlane, existing_cluster: ExistingCluster | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """One operator for the session, authenticated only as the chart's ServiceAccount.

    A process of this machine (tests kill, pause and replace it); its step Jobs run the runner
    image on the node as real containers, with the egress isolation check on. On an existing
    cluster the runner image must be there under the same name (or `TOWLINE_TEST_RUNNER_IMAGE`).
    """
    work = tmp_path_factory.mktemp("operator")
    kubeconfig = operator_kubeconfig(towline_installed, work / "kubeconfig")
    pods = StepPods()
    if existing_cluster is not None:
        pods = cluster_step_pods(existing_cluster, os.environ.get("TOWLINE_TEST_RUNNER_IMAGE") or pods.runner_image)
    # Under `tests.suite` each worker's operator has its own Lease and watches only its worker's namespaces.
    scope, worker = operator_scope(), worker_id()
    process = OperatorProcess(kubeconfig=kubeconfig, log_path=work / "operator.log", metrics_port=free_port(),
                              pods=pods, watch_namespaces=scope,
                              identity=f"towline-operator-{worker}" if worker else "towline-operator-0",
                              settings={**({"TOWLINE_LEASE_NAME": f"towline-operator-{worker}"} if worker else {}),
                                        **code_steps_for_code_tests()},
                              ).start()
    _SESSION["operator"] = process
    yield process
    _SESSION.pop("operator", None)
    process.stop()
    log = Path(process.log_path)
    kept = kept_logs_root() / (f"operator-{worker}.log" if worker else "operator.log")
    kept.write_bytes(log.read_bytes() if log.exists() else b"")


@pytest.fixture
def clocked_operator(
    towline_operator: OperatorProcess, tmp_path: Path
) -> Iterator[tuple[OperatorProcess, MovableClock]]:
    """The session operator, restarted on a clock the test moves (`towline_dev.fakeclock`), for the test only.

    Schedule tests move it past a slot instead of waiting for the real minute. The same
    settings, identity, Lease and metrics port; the session operator is back afterwards.
    """
    clock = MovableClock(tmp_path / "operator-clock")
    with in_place_of(towline_operator, tmp_path, clock_file=clock.path) as clocked:
        yield clocked, clock


@pytest.fixture(scope="module")
def chart_left_to_helm(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """For a module that `helm install`s the chart on the session's cluster: while it runs, the
    session operator is stopped (two operators must never reconcile the same runs) and the chart
    objects `towline_installed` applied with kubectl are removed (Helm adopts none of them).
    Afterwards both come back, the operator with a fresh token of the re-created ServiceAccount."""
    operator = _SESSION.get("operator")
    applied = control_plane.kubectl("get", "serviceaccount", SERVICE_ACCOUNT, "-n", OPERATOR_NAMESPACE,
                                    check=False).returncode == 0
    if operator is not None:
        operator.stop()
    if applied:
        control_plane.kubectl("delete", "--ignore-not-found", "--wait=true", "-f", "-",
                              stdin=render_chart(control_plane), timeout=120)
    # The session applied the CRDs with kubectl: release `towline` manages them from here on (crds.enabled),
    # as README's "Upgrade" lets a release take over CRDs applied by hand.
    adopt_crds(control_plane)
    try:
        yield control_plane
    finally:
        if applied:
            install_chart(control_plane)
        if operator is not None:
            operator_kubeconfig(control_plane, operator.kubeconfig)
            operator.start()


@pytest.fixture
def chromium() -> Iterator[Any]:
    """Headless Chromium (towline_dev.browser) for the test, 1600x1000; a file whose screenshots need another size
    has a `chromium` of its own."""
    from towline_dev.browser import headless_chromium  # noqa: PLC0415 - selenium only for the browser tests

    with headless_chromium(print, width=1600, height=1000) as driver:
        yield driver


@pytest.fixture
def shown_namespace(request: pytest.FixtureRequest, towline_installed: ControlPlane) -> Iterator[str]:
    """The namespace of a test whose screenshots the docs show: the test's own `namespace`, or, when writing the
    pictures (TOWLINE_UPDATE_SCREENSHOTS=1, one test at a time), `team`, the README's `kubectl towline -n team ui`,
    made and deleted here, so the pictures show no generated name."""
    if os.environ.get("TOWLINE_UPDATE_SCREENSHOTS") != "1":
        yield request.getfixturevalue("namespace")
        return
    cluster, name = towline_installed, "team"
    cluster.kubectl("create", "namespace", name)  # fails if it exists: the pictures show only this test's objects
    try:
        wait_for("the new namespace's default ServiceAccount", lambda: get(cluster, "serviceaccounts", "default", name))
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def team_namespace(towline_installed: ControlPlane, namespace: str) -> str:
    """A namespace where carol may start runs and alice, bob and carol may try to decide approvals.

    Whether a decision is accepted is then up to the chart's admission policy,
    not to RBAC: that is what the approval tests exercise.
    """
    bind_role(towline_installed, namespace, "towline-runner", users=("carol", "alice", "bob"))
    bind_role(towline_installed, namespace, "towline-approver", users=("alice", "bob", "carol"))
    return namespace


@pytest.fixture(scope="session")
def test_hosts(request: pytest.FixtureRequest, existing_cluster: ExistingCluster | None) -> Iterator[str]:
    """The test-hosts network namespace (towline_dev.node.probehosts) for the session, holding
    TEST_SERVER_ADDRESS and its alias: `support.ScriptedServer`s listen there, where step pods reach them."""
    if existing_cluster is not None:
        pytest.skip(f"steps on the cluster {ENVIRONMENT_VARIABLE} names cannot reach this machine's test hosts")
    request.getfixturevalue("real_node")  # root, and the node's routes to the namespace
    network = TestHostNetwork().start()
    network.add([TEST_SERVER_ADDRESS, TEST_SERVER_ALIAS])
    yield TEST_SERVER_ADDRESS
    network.stop()


@pytest.fixture(scope="session")
def identity_provider(
    request: pytest.FixtureRequest, existing_cluster: ExistingCluster | None
) -> Iterator[IdentityProvider]:
    """The tests' OpenID Connect provider (towline_dev.idp): Hydra at ISSUER_URL with the login app, whose ID tokens
    for the web view's client the control plane's API server trusts. `.issuer`, `.ca_bundle`, `.register_client`,
    `.password(name)`, `.chromium_arguments()`; `towline_dev.idp.flow.sign_in` signs a person in.
    On the suite's shared node the suite started it; otherwise this session starts it on first use."""
    if existing_cluster is not None:
        pytest.skip(f"the cluster {ENVIRONMENT_VARIABLE} names does not trust this machine's test identity provider")
    cluster = request.getfixturevalue("real_node")  # root, the plane's CA, and the node's routes to the test hosts
    if os.environ.get(SHARED_NODE):
        yield IdentityProvider.attach(cluster.plane.state_dir)
        return
    provider = IdentityProvider(cluster.plane.state_dir).start()
    yield provider
    provider.stop()


@pytest.fixture(scope="session")
def web_view_client(request: pytest.FixtureRequest, identity_provider: IdentityProvider) -> OAuthClient:
    """The web view's OAuth2 client (`towline-web`, the audience the API server accepts), with TEST_REDIRECT_URI
    among its redirect URIs; `identity_provider.register_client([uri])` adds another. Once the API server takes
    its ID tokens: its authenticator fetches the issuer's keys on its own schedule (every 10 s until it has them)."""
    client = identity_provider.register_client([TEST_REDIRECT_URI])
    plane = request.getfixturevalue("real_node").plane
    token = sign_in(identity_provider, client, "dave").id_token
    wait_for("the API server to take the provider's ID tokens", lambda: whoami(plane, token), 120)
    return client

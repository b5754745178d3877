"""etcd + kube-apiserver + kube-controller-manager on loopback, started and stopped as one.

A `ControlPlane` owns a state directory (certificates, tokens, kubeconfigs, etcd
data, one log file per component) and three child processes on free loopback
ports. It serves HTTPS with a CA of its own, authenticates people and components
with static tokens generated per start (and ID tokens of the tests' OpenID Connect
provider, towline_dev.idp), authorises with RBAC (and the Node
authorizer), and signs ServiceAccount tokens. It has no kubelet and no scheduler
of its own: `towline_dev.node` runs a real node (with kube-scheduler) next to it,
for which the API server serves on the node's address instead of loopback.

It never touches anything outside its state directory and never leaves a child
running: see `towline_dev.processes` for how orphans are prevented.
It imports no Kubernetes client, so the `towline` CLI can use it without
crossing the "only towline.k8s talks to the API server" contract.
"""

from __future__ import annotations

import atexit
import csv
import http.client
import json
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from towline_dev.binaries import BinarySet
from towline_dev.certs import FRONT_PROXY_CLIENT, ControlPlaneCerts, generate_certs
from towline_dev.idp import issuer
from towline_dev.kubeconfig import (
    CONTROLLER_MANAGER,
    PEOPLE,
    build_kubeconfig,
    context_name,
    new_tokens,
    token_file_text,
    write_kubeconfig,
    write_private_file,
)
from towline_dev.processes import free_loopback_port, spawn, stop_process, wait_for

SERVICE_CLUSTER_IP_RANGE = "198.51.100.128/26"
"""A documentation range (RFC 5737): the local node's kube-proxy routes it, and a Service
address can never be mistaken for a real host. `towline_dev.node.layout` lays out the rest."""
KUBERNETES_SERVICE_IP = "198.51.100.129"
"""The first address of the range: the `kubernetes` Service."""

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")


class ControlPlaneError(RuntimeError):
    """A component exited or never became ready; the message carries the tail of its log."""


class ControlPlane:
    """One local control plane. Use as a context manager, or call `start()` and `stop()`."""

    def __init__(
        self,
        binaries: BinarySet,
        state_dir: Path | None = None,
        *,
        install_signal_handlers: bool = True,
        ready_timeout: float = 90.0,
        node_address: str | None = None,
        controller_manager_qps: int = 100,
    ) -> None:
        """`node_address`: serve on this local address instead of 127.0.0.1 (it must exist),
        so pods on a local node reach the API server through the `kubernetes` Service.
        `controller_manager_qps`: kube-controller-manager's `--kube-api-qps` (burst twice that); its Job
        controller makes a step's pod and records the step Job's status through that client, so it caps
        the steps per second a cluster can run (docs/benchmarks.md)."""
        self.binaries = binaries
        self.address = node_address or "127.0.0.1"
        self.controller_manager_qps = controller_manager_qps
        self._owns_state_dir = state_dir is None
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="towline-controlplane-"))
        self._install_signal_handlers = install_signal_handlers
        self._ready_timeout = ready_timeout
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._argv: dict[str, list[str]] = {}
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()
        self._connections = threading.local()
        """`api_get`'s kept connections: each thread's, by user (`_kept_connections`)."""
        self.apiserver_port = 0
        self.etcd_port = 0
        self.startup_seconds: float | None = None
        """Wall time of the last `start()`, from nothing to a usable cluster."""
        self.attached = False
        """Started by another process (see `attach`): `stop()` and `remove_state()` leave it alone."""

    @classmethod
    def attach(cls, binaries: BinarySet, state_dir: Path, *, node_address: str | None = None) -> ControlPlane:
        """The control plane another process started in `state_dir`, to use but not to own.

        Concurrent test workers share one plane this way: they read its kubeconfig and tokens;
        `stop()` and `restart_component()` have no processes of theirs to act on.
        """
        plane = cls(binaries, state_dir, install_signal_handlers=False, node_address=node_address)
        plane.attached = True
        with (state_dir / "tokens.csv").open(newline="") as tokens:
            plane._tokens = {row[1]: row[0] for row in csv.reader(tokens) if len(row) >= 2}
        document = yaml.safe_load(plane.kubeconfig.read_text())
        server = urllib.parse.urlsplit(document["clusters"][0]["cluster"]["server"])
        if server.port is None or server.hostname != plane.address:
            raise ControlPlaneError(f"{plane.kubeconfig} serves {server.geturl()}, not a plane on {plane.address}")
        plane.apiserver_port = server.port
        return plane

    # -- paths --------------------------------------------------------------------------------

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        """Contexts for the people (admin, alice, bob, carol); admin is current."""
        return self.state_dir / "kubeconfig"

    @property
    def authentication_config(self) -> Path:
        """The API server's structured authentication configuration: the tests' OpenID Connect issuer."""
        return self.state_dir / "authentication.yaml"

    @property
    def ca_cert(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.apiserver_port}"

    def log_path(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start all components and return once the cluster accepts work from people and Jobs."""
        started = time.monotonic()
        if self._install_signal_handlers:
            _exit_on_sigterm()
        for attempt in (1, 2):
            try:
                self._start_once()
                break
            except ControlPlaneError as error:
                # Free ports are picked before the components bind them; another
                # process may win that race. One retry with new ports settles it.
                if attempt == 2 or "address already in use" not in str(error):
                    raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _start_once(self) -> None:
        atexit.register(self.stop)
        self._prepare_state_dir()
        certs = generate_certs(self.pki_dir, extra_ips=(self.address, KUBERNETES_SERVICE_IP))
        self._write_credentials(certs)
        try:
            self._start_etcd()
            self._start_apiserver(certs)
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the components in reverse order; idempotent and safe to call from atexit."""
        if self.attached:
            return
        with self._lock:
            for component in reversed(COMPONENTS):
                process = self._processes.pop(component, None)
                if process is not None:
                    stop_process(process, grace_seconds=10.0)
            atexit.unregister(self.stop)
            data = self.state_dir / "etcd-data"
            if data.exists():
                shutil.rmtree(data, ignore_errors=True)

    def remove_state(self) -> None:
        """Stop, and delete the state directory (logs included)."""
        if self.attached:
            return
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def restart_component(self, component: str, *, down_seconds: float = 0.0) -> float:
        """Stop one component (SIGTERM) and start it again `down_seconds` later with the same flags and
        state (etcd keeps its data, the API server its port); return the seconds until /readyz passed.

        For chaos tests: every other component and client must reconnect by itself. Call it from a
        thread that outlives the component (the main one): it dies with its starting thread.
        """
        if component not in self._argv:
            raise ValueError(f"no running component {component!r}; restart one of {', '.join(COMPONENTS)}")
        started = time.monotonic()
        with self._lock:
            process = self._processes.pop(component, None)
            if process is not None:
                stop_process(process, grace_seconds=10.0)
            time.sleep(down_seconds)
            self._start(component, self._argv[component])
        if component == "etcd":
            self._wait_for("etcd to accept clients", self._etcd_healthy, self._ready_timeout)
        self._wait_for("kube-apiserver /readyz", lambda: self._get_ok("/readyz"), self._ready_timeout)
        return time.monotonic() - started

    def is_running(self) -> bool:
        return bool(self._processes) and all(p.poll() is None for p in self._processes.values())

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self._processes.items()}

    # -- use ----------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Environment that points kubectl (and any client library) at this cluster as admin."""
        return {"KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, user: str = "admin", check: bool = True, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this cluster as `user` (a context in `kubeconfig`)."""
        argv = [
            str(self.binaries.path("kubectl")), "--kubeconfig", str(self.kubeconfig),
            "--context", context_name(user), *args,
        ]
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=check, timeout=timeout)

    def copy_logs(self, destination: Path) -> Path:
        """Copy every component log (and anything else under logs/) to `destination`."""
        destination.mkdir(parents=True, exist_ok=True)
        if self.logs_dir.exists():
            shutil.copytree(self.logs_dir, destination, dirs_exist_ok=True)
        return destination

    def api_get(self, path: str, *, user: str = "admin", timeout: float = 5.0) -> tuple[int, bytes]:
        """A plain HTTPS GET as `user`; for readiness probes and tests that need no client library."""
        return self.api_request("GET", path, user=user, timeout=timeout)

    def api_request(
        self, method: str, path: str, *, body: bytes | None = None, user: str = "admin", timeout: float = 5.0,
        token: str | None = None,
    ) -> tuple[int, bytes]:
        """One HTTPS request as `user` (a JSON `body`, if any): its status and body. With `token`, as whoever
        bears it instead (a ServiceAccount's, as its own client would send it), over `user`'s kept connection.

        Over a connection kept per thread and user: the tests' waits poll several times a second, and a TLS
        handshake per poll cost the test process ten times the GET's own CPU (docs/benchmarks.md). A kept
        connection the server has closed since (a restart, its idle timeout) is opened again, once: also for
        a write, which the server then never received (the callers' writes are creations, which a second
        arrival would refuse as existing)."""
        headers = {"Authorization": f"Bearer {token or self._tokens[user]}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        kept = self._kept_connections()
        for attempt in (1, 2):
            connection = kept.get(user)
            if connection is None or (connection.host, connection.port) != (self.address, self.apiserver_port):
                connection = http.client.HTTPSConnection(self.address, self.apiserver_port,
                                                         context=self._ssl_context())
                kept[user] = connection
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            try:
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                status, body = response.status, response.read()
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                kept.pop(user, None)
                if attempt == 1 and not isinstance(error, TimeoutError):
                    continue
                if isinstance(error, OSError):
                    raise
                # Callers take a plane that does not answer as an OSError, as urllib raised it.
                raise ConnectionError(str(error)) from error
            if response.will_close:
                connection.close()
                kept.pop(user, None)
            return status, body
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _kept_connections(self) -> dict[str, http.client.HTTPSConnection]:
        """This thread's kept connections, by user."""
        kept: dict[str, http.client.HTTPSConnection] | None = getattr(self._connections, "by_user", None)
        if kept is None:
            kept = self._connections.by_user = {}
        return kept

    # -- internals ----------------------------------------------------------------------------

    def _prepare_state_dir(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)
        shutil.rmtree(self.state_dir / "etcd-data", ignore_errors=True)
        self.logs_dir.mkdir(exist_ok=True)
        for component in COMPONENTS:
            self.log_path(component).unlink(missing_ok=True)

    def _write_credentials(self, certs: ControlPlaneCerts) -> None:
        self.etcd_port = free_loopback_port()
        self.apiserver_port = free_loopback_port()  # a port free on loopback is free on the node address
        self._tokens = new_tokens()
        write_private_file(self.state_dir / "tokens.csv", token_file_text(self._tokens))
        ca_pem = certs.ca_cert.read_bytes()

        def kubeconfig(path: Path, users: tuple[str, ...]) -> None:
            document = build_kubeconfig(
                server=self.server, ca_pem=ca_pem, tokens=self._tokens, users=users, current=users[0]
            )
            write_kubeconfig(path, document)

        kubeconfig(self.kubeconfig, tuple(user.name for user in PEOPLE))
        kubeconfig(self.state_dir / "controller-manager.kubeconfig", (CONTROLLER_MANAGER.name,))
        # The provider's serving certificate is signed by this plane's CA when it starts (towline_dev.idp.provider).
        self.authentication_config.write_text(yaml.safe_dump(issuer.authentication_config(ca_pem.decode("ascii"))))

    def _start(self, component: str, argv: list[str]) -> None:
        self._argv[component] = argv
        self._processes[component] = spawn(argv, log_path=self.log_path(component), cwd=self.state_dir)

    def _start_etcd(self) -> None:
        peer_port = free_loopback_port()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self._start("etcd", [
            str(self.binaries.path("etcd")),
            "--name=towline-dev",
            f"--data-dir={self.state_dir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=towline-dev={peer}",
            "--unsafe-no-fsync",  # test data: speed beats durability
            "--log-level=warn",
        ])

    def _start_apiserver(self, certs: ControlPlaneCerts) -> None:
        self._start("kube-apiserver", [
            str(self.binaries.path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.state_dir / 'apiserver-certs'}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca_cert}",
            f"--token-auth-file={self.state_dir / 'tokens.csv'}",
            # The tests' OpenID Connect provider (towline_dev.idp): its ID tokens for the web view's client.
            f"--authentication-config={self.authentication_config}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={certs.service_account_public_key}",
            f"--service-account-signing-key-file={certs.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=false",
            f"--kubelet-client-certificate={certs.kubelet_client_cert}",
            f"--kubelet-client-key={certs.kubelet_client_key}",
            f"--kubelet-certificate-authority={certs.ca_cert}",
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
            # Aggregated APIs (the archive's archive.towline.dev): the API server proxies a request with the
            # person it authenticated in these headers, proving itself with the front-proxy client certificate,
            # and publishes the CA and header names in kube-system/extension-apiserver-authentication.
            f"--requestheader-client-ca-file={certs.front_proxy_ca_cert}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={certs.front_proxy_client_cert}",
            f"--proxy-client-key-file={certs.front_proxy_client_key}",
            # Dial an aggregated API's endpoint addresses, not its Service's ClusterIP: the API server runs on the
            # machine, outside the node's Service routing (as on clusters whose control plane has no kube-proxy).
            "--enable-aggregator-routing=true",
        ])

    def _start_controller_manager(self) -> None:
        self._start("kube-controller-manager", [
            str(self.binaries.path("kube-controller-manager")),
            f"--kubeconfig={self.state_dir / 'controller-manager.kubeconfig'}",
            "--secure-port=0",  # nothing scrapes it; one port fewer to race for
            "--leader-elect=false",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
            f"--root-ca-file={self.ca_cert}",
            f"--cluster-signing-cert-file={self.ca_cert}",
            f"--cluster-signing-key-file={self.pki_dir / 'ca.key'}",
            "--cluster-name=towline-dev",
            f"--kube-api-qps={self.controller_manager_qps}",
            f"--kube-api-burst={2 * self.controller_manager_qps}",
        ])

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self._ready_timeout

        def remaining() -> float:
            return max(deadline - time.monotonic(), 0.1)

        self._wait_for("etcd to accept clients", self._etcd_healthy, remaining())
        self._wait_for("kube-apiserver /readyz", lambda: self._get_ok("/readyz"), remaining())
        # The controller manager gives up if the API server is not healthy within
        # seconds, so it starts only once /readyz has passed.
        self._start_controller_manager()
        self._wait_for(
            "the service account controller (ServiceAccount default/default)",
            lambda: self._get_ok("/api/v1/namespaces/default/serviceaccounts/default"),
            remaining(),
        )
        self._wait_for(
            "the root CA publisher (ConfigMap default/kube-root-ca.crt)",
            lambda: self._get_ok("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"),
            remaining(),
        )

    def _wait_for(self, what: str, probe: Any, timeout: float) -> None:
        def ready() -> bool:
            self._raise_if_exited()
            return bool(probe())

        try:
            wait_for(ready, timeout=timeout, interval=0.1, what=what)
        except TimeoutError as error:
            raise ControlPlaneError(f"{error}\n{self._log_tails()}") from None

    def _raise_if_exited(self) -> None:
        for component, process in self._processes.items():
            if process.poll() is not None:
                raise ControlPlaneError(
                    f"{component} exited with status {process.returncode} during start-up; "
                    f"last lines of {self.log_path(component)}:\n{_tail(self.log_path(component))}"
                )

    def _log_tails(self) -> str:
        return "\n".join(
            f"--- {component} ({self.log_path(component)}):\n{_tail(self.log_path(component))}"
            for component in self._processes
        )

    def _etcd_healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.etcd_port}/health"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _get_ok(self, path: str) -> bool:
        try:
            status, _ = self.api_get(path, timeout=2)
        except OSError:
            return False
        return status == 200

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_cert))


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so `finally` blocks and atexit stop the children.

    SIGINT already raises KeyboardInterrupt, which unwinds the same way. Only the
    main thread may install handlers, and a handler someone else installed is kept.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)

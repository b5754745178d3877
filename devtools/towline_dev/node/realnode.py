"""A real node for the local control plane: containerd + runc + CNI bridge, kubelet,
kube-proxy, kube-scheduler, kube-router (NetworkPolicy only), CoreDNS and a default
StorageClass (local-path-provisioner, volumes under the state directory).

`RealNode` joins a running `ControlPlane` that serves on the node address (see
`NodeCluster`). Its processes are children of this process (see
`towline_dev.processes`); what they leave outside the state directory — network
namespaces, mounts, netfilter chains, ipsets, the CNI bridge, shims — is removed
by `stop()`, so a session can start and stop a node repeatedly. It needs root.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from towline_dev.binaries import BinarySet, find_binaries
from towline_dev.controlplane import SERVICE_CLUSTER_IP_RANGE, ControlPlane
from towline_dev.node import cleanup, network
from towline_dev.node.addons import LOCAL_PATH_NAMESPACE, coredns_manifests, kube_router_rbac, local_path_manifests
from towline_dev.node.credentials import (
    KUBE_PROXY,
    KUBE_ROUTER,
    KUBE_SCHEDULER,
    KUBELET,
    kubeconfig_path,
    write_node_credentials,
)
from towline_dev.node.layout import (
    NODE_ADDRESS,
    NODE_NAME,
    POD_CIDR,
    NodePaths,
    cni_config,
    containerd_config,
    dump_yaml,
    kube_proxy_config,
    kubelet_config,
)
from towline_dev.node.nodeimages import node_images
from towline_dev.node.packages import NodeUnavailable, ensure_packages
from towline_dev.node.probehosts import NAMESPACE as TEST_HOSTS_NAMESPACE
from towline_dev.node.probehosts import TestHostNetwork
from towline_dev.processes import free_loopback_port, signal_group, spawn, stop_process, wait_for

Progress = Callable[[str], None]
COMPONENTS = ("containerd", "kubelet", "kube-proxy", "kube-router", "kube-scheduler")
_SYSCTLS = {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"}
_IPV6_SYSCTLS = {"net.ipv6.conf.default.addr_gen_mode": "1"}
"""While the node runs, a new interface gets no IPv6 link-local address (mode 1, none): every pod's veth would
otherwise add and remove one beside the tests' browser, which Chromium takes for a network change and fails what
it is loading (ERR_NETWORK_CHANGED). The node uses IPv4 only. Set only where the kernel has IPv6."""


def _quiet(message: str) -> None:
    del message


class RealNode:
    """One node. Use `NodeCluster` for a control plane with a node, or call `start()`/`stop()`
    on a node of a control plane started with ``node_address=NODE_ADDRESS`` (one per machine)."""

    def __init__(
        self, plane: ControlPlane, state_dir: Path | None = None, *, progress: Progress = _quiet,
        ready_timeout: float = 180.0, attached: bool = False,
    ) -> None:
        """`attached`: the node another process runs in `state_dir`; `start()` and `stop()` refuse or
        leave it, `paused()` has no process to pause."""
        if plane.address != NODE_ADDRESS:
            raise ValueError(
                f"the control plane must serve on the node address: ControlPlane(node_address={NODE_ADDRESS!r})"
            )
        self.plane = plane
        self.paths = NodePaths(state_dir or Path(tempfile.mkdtemp(prefix="towline-node-")))
        self._progress = progress
        self._ready_timeout = ready_timeout
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._saved_sysctls: dict[str, str] = {}
        self._lock = threading.Lock()
        self.startup_seconds: float | None = None
        """Wall time of the last `start()`: nothing to a Ready node with cluster DNS serving."""
        self.attached = attached

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, images: Sequence[Path] = ()) -> RealNode:
        """Start every component, load `images` (OCI archives), return once Ready with DNS."""
        if self.attached:
            raise RuntimeError(f"the node in {self.paths.root} belongs to another process; it starts it")
        started = time.monotonic()
        binaries = _node_prerequisites(self._progress)
        try:
            self._prepare()
            self._start("containerd", ["containerd", "--config", str(self.paths.containerd_config)])
            self._wait("containerd to serve", lambda: cleanup.ctr(self.paths, "version").returncode == 0, 30)
            for archive in [*node_images(binaries).values(), *images]:
                self.load_image(archive)
            self._apply(kube_router_rbac())
            self._start("kubelet", [
                str(binaries.path("kubelet")), f"--config={self.paths.root / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig_path(self.paths, KUBELET)}", f"--root-dir={self.paths.kubelet_dir}",
                f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_ADDRESS}", "--v=1",
            ])
            self._wait("the kubelet to register the node", lambda: self.node() is not None, self._ready_timeout)
            self.plane.kubectl("patch", "node", NODE_NAME, "--type=merge", "-p",
                               json.dumps({"spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]}}), check=False)
            self._start("kube-proxy", [
                str(binaries.path("kube-proxy")), f"--config={self.paths.root / 'kube-proxy.yaml'}",
            ])
            self._start("kube-router", [
                str(binaries.path("kube-router")), f"--kubeconfig={kubeconfig_path(self.paths, KUBE_ROUTER)}",
                "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
                f"--hostname-override={NODE_NAME}", f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--health-port=0", "--metrics-port=0",
            ])
            scheduler_kubeconfig = kubeconfig_path(self.paths, KUBE_SCHEDULER)
            self._start("kube-scheduler", [
                str(binaries.path("kube-scheduler")), f"--kubeconfig={scheduler_kubeconfig}",
                f"--authentication-kubeconfig={scheduler_kubeconfig}",
                f"--authorization-kubeconfig={scheduler_kubeconfig}",
                "--leader-elect=false", "--secure-port=0",
            ])
            self._apply(coredns_manifests())
            self._wait("the node to be Ready", self.is_ready, self._ready_timeout)
            self._wait("CoreDNS to be ready", self._deployment_ready("kube-system", "coredns"), self._ready_timeout)
            # Only now, with CoreDNS through to the API server by the `kubernetes` Service: a pod that dials it before
            # kube-proxy's rules are in waits 30 s for its first answer (seen: the provisioner's first list).
            self._apply(local_path_manifests(self.paths.volumes_dir))
            self._wait("the volume provisioner to run",
                       self._deployment_ready(LOCAL_PATH_NAMESPACE, "local-path-provisioner"), self._ready_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Tear pods down through the kubelet, stop every component, remove what they left."""
        if self.attached:
            return
        with self._lock:
            if not self._processes and not self.paths.root.exists():
                return
            self._stop_component("kube-scheduler")
            if self._processes.get("kubelet") is not None and self.plane.is_running():
                self.plane.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force",
                                   "--wait=false", check=False, timeout=60)
                # Stopped sandboxes have had their network torn down by CNI; the kubelet would
                # remove them only at its next garbage collection, so `remove_containers` does.
                with contextlib.suppress(TimeoutError):  # if not, killed below without the kubelet
                    wait_for(lambda: not cleanup.running_tasks(self.paths),
                             timeout=30, interval=0.25, what="the kubelet to stop every pod")
            for component in ("kubelet", "kube-proxy", "kube-router"):
                self._stop_component(component)
            if self.plane.is_running():
                self.plane.kubectl("delete", "node", NODE_NAME, "--ignore-not-found", check=False)
            if "containerd" in self._processes:
                cleanup.remove_containers(self.paths)
            self._stop_component("containerd")
            cleanup.kill_shims(self.paths)
            cleanup.unmount_all(self.paths.root)
            network.clean_netfilter()
            network.remove_links(bridge_only=True)
            for key, value in self._saved_sysctls.items():
                network.set_sysctl(key, value)
            self._saved_sysctls = {}

    def remove_state(self) -> None:
        if self.attached:
            return
        self.stop()
        cleanup.unmount_all(self.paths.root)
        shutil.rmtree(self.paths.root, ignore_errors=True)

    # -- use ----------------------------------------------------------------------------------

    def load_image(self, archive: Path) -> None:
        """Import an OCI archive into the node's containerd (pods use it with imagePullPolicy Never).

        Without unpacking it: containerd's CRI plugin unpacks an image into the snapshotter when the first
        container needs it, so a node never unpacks an image none of its pods runs. Unpacking is most of an
        import's cost (about 7 of 8.5 s of containerd's CPU for the operator image), and every node the tests
        start imports every image (docs/benchmarks.md)."""
        cleanup.ctr(self.paths, "images", "import", "--no-unpack", str(archive), check=True, timeout=600)

    def images(self) -> list[str]:
        return cleanup.ctr(self.paths, "images", "ls", "-q").stdout.split()

    def remove_image(self, reference: str) -> None:
        """Drop an image from the node's containerd (one a test loaded, so later tests cannot use it)."""
        cleanup.ctr(self.paths, "images", "rm", reference, check=True)

    def node(self) -> dict[str, Any] | None:
        status, body = self.plane.api_get(f"/api/v1/nodes/{NODE_NAME}")
        return json.loads(body) if status == 200 else None

    def is_ready(self) -> bool:
        node = self.node() or {}
        conditions = node.get("status", {}).get("conditions", [])
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def is_running(self) -> bool:
        return bool(self._processes) and all(p.poll() is None for p in self._processes.values())

    def log_path(self, component: str) -> Path:
        return self.paths.log_path(component)

    @contextlib.contextmanager
    def paused(self, component: str) -> Iterator[None]:
        """`component` (e.g. "kube-router") stopped with SIGSTOP inside the block, continued after it."""
        process = self._processes[component]
        signal_group(process, signal.SIGSTOP)
        try:
            yield
        finally:
            signal_group(process, signal.SIGCONT)

    def copy_logs(self, destination: Path) -> Path:
        destination.mkdir(parents=True, exist_ok=True)
        for source in (self.paths.logs_dir, self.paths.pod_logs_dir):
            if source.exists():
                shutil.copytree(source, destination / source.name, dirs_exist_ok=True)
        return destination

    # -- internals ----------------------------------------------------------------------------

    def _prepare(self) -> None:
        paths = self.paths
        for directory in (paths.root, paths.logs_dir, paths.cni_conf_dir, paths.kubelet_dir, paths.pod_logs_dir,
                          paths.containerd_config.parent, paths.volumes_dir):
            directory.mkdir(parents=True, exist_ok=True)
        paths.root.chmod(0o711)
        # Only root (the provisioner's helper pods, the kubelet) goes in; a pod sees its own volume's directory.
        paths.volumes_dir.chmod(0o700)
        (paths.root / cleanup.STATE_MARKER).write_text("a towline_dev.node state directory\n")
        paths.containerd_config.write_text(containerd_config(paths))
        (paths.cni_conf_dir / "10-towline.conflist").write_text(json.dumps(cni_config(paths), indent=2))
        (paths.root / "kubelet.yaml").write_text(dump_yaml(kubelet_config(
            paths, ca_file=self.plane.ca_cert, healthz_port=free_loopback_port())))
        (paths.root / "kube-proxy.yaml").write_text(dump_yaml(kube_proxy_config(
            kubeconfig=kubeconfig_path(paths, KUBE_PROXY), healthz_port=free_loopback_port(),
            metrics_port=free_loopback_port())))
        write_node_credentials(paths, control_plane_pki=self.plane.pki_dir, server=self.plane.server)
        network.add_node_address()
        if not Path("/proc/sys/net/bridge").exists():
            subprocess.run(["modprobe", "br_netfilter"], capture_output=True, check=False)
        ipv6 = {key: value for key, value in _IPV6_SYSCTLS.items()
                if Path("/proc/sys", *key.split(".")).exists()}
        for key, value in {**_SYSCTLS, **ipv6}.items():
            self._saved_sysctls.setdefault(key, network.set_sysctl(key, value))

    def _start(self, component: str, argv: list[str]) -> None:
        self._progress(f"starting {component}")
        self._processes[component] = spawn(argv, log_path=self.paths.log_path(component), cwd=self.paths.root)

    def _stop_component(self, component: str) -> None:
        process = self._processes.pop(component, None)
        if process is not None:
            stop_process(process, grace_seconds=10.0)

    def _apply(self, documents: list[dict[str, Any]]) -> None:
        manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
        self.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest)

    def _deployment_ready(self, namespace: str, name: str) -> Callable[[], bool]:
        def ready() -> bool:
            status, body = self.plane.api_get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            return status == 200 and bool(json.loads(body).get("status", {}).get("readyReplicas"))

        return ready

    def _wait(self, what: str, probe: Callable[[], bool], timeout: float) -> None:
        def ready() -> bool:
            for component, process in self._processes.items():
                if process.poll() is not None:
                    raise NodeUnavailable(
                        f"{component} exited with status {process.returncode}; last lines of "
                        f"{self.paths.log_path(component)}:\n{_tail(self.paths.log_path(component))}"
                    )
            return probe()

        self._progress(f"waiting for {what}")
        try:
            wait_for(ready, timeout=timeout, interval=0.25, what=what)
        except TimeoutError as error:
            tails = "\n".join(f"--- {c}:\n{_tail(self.paths.log_path(c))}" for c in self._processes)
            raise NodeUnavailable(f"{error}\n{tails}") from None


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


NODE_LOCK = Path("/run/towline-node.lock")
"""One node per machine: its names, addresses and netfilter chains are fixed. (A world, towline_dev.node.world,
is a machine of its own: it has its own /run, so its own lock, beside the machine's node.)"""


class NodeCluster:
    """A control plane serving on the node address, and its node: what tests and `make dev` start.

    Holds the machine's node lock from `start()` to `stop()`; a second one waits for it.
    """

    def __init__(self, state_dir: Path | None = None, *, progress: Progress = _quiet) -> None:
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="towline-cluster-"))
        self._progress = progress
        self.plane: ControlPlane | None = None
        self.node: RealNode | None = None
        self.startup_seconds: float | None = None
        self._lock_file: IO[str] | None = None
        self.attached = False
        """Started by another process (see `attach`): this one uses it and never stops it."""

    @classmethod
    def attach(cls, state_dir: Path) -> NodeCluster:
        """The cluster another process started in `state_dir` and still runs (it holds the node lock
        and stops it): for concurrent test workers sharing one node. `stop()` leaves it running."""
        cluster = cls(state_dir)
        cluster.attached = True
        cluster.plane = ControlPlane.attach(find_binaries(), state_dir / "control-plane", node_address=NODE_ADDRESS)
        cluster.node = RealNode(cluster.plane, state_dir / "node", attached=True)
        return cluster

    def start(self, images: Sequence[Path] = ()) -> NodeCluster:
        started = time.monotonic()
        binaries = _node_prerequisites(self._progress)
        self._take_machine()
        network.add_node_address()
        try:
            self.plane = ControlPlane(binaries, self.state_dir / "control-plane", node_address=NODE_ADDRESS).start()
            self._progress(f"control plane up in {self.plane.startup_seconds:.1f} s at {self.plane.server}")
            self.node = RealNode(self.plane, self.state_dir / "node", progress=self._progress).start(images)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        if self.attached:
            self.node = self.plane = None
            return
        if self._lock_file is None:
            # Never took the machine (e.g. interrupted while waiting for the lock): the node
            # address, bridge and rules belong to whoever holds it, so touch nothing of theirs.
            shutil.rmtree(self.state_dir, ignore_errors=True)
            return
        if self.node is not None:
            self.node.remove_state()
        if self.plane is not None:
            self.plane.remove_state()
        self.node = self.plane = None
        network.remove_links(bridge_only=False)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def _take_machine(self) -> None:
        """Wait for the node lock, then clear what a node that died without stopping left."""
        if self._lock_file is not None:
            return
        handle = NODE_LOCK.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._progress(f"another local node runs on this machine; waiting for it to stop ({NODE_LOCK})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        self._lock_file = handle
        cleanup.remove_stale(self._progress)
        if TestHostNetwork.present():
            # Made beside a node (its routes lead there) by a test run killed with it: no node runs now.
            self._progress(f"removing the test-hosts namespace a killed test run left ({TEST_HOSTS_NAMESPACE})")
            TestHostNetwork.remove()
        network.clean_netfilter()
        network.remove_links(bridge_only=True)


def _node_prerequisites(progress: Callable[[str], None]) -> BinarySet:
    """Root, the node's Debian packages and the binaries: what every start needs first."""
    if os.geteuid() != 0:
        raise NodeUnavailable("the local node needs root (containers, network namespaces, iptables)")
    ensure_packages(progress)
    return find_binaries(progress=progress)

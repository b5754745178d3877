"""Operator replicas on the real node's control plane, for chaos: who leads, kill, pause, CPU time.

Steps run the runner image in real containers (no runner command), with the egress isolation
check on (kube-router enforces NetworkPolicies on the real node). The operator runs outside the
cluster, so its isolation probe is the `kubernetes` Service as every pod sees it.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from towline.k8s.shards import shard_lease_name, shard_of
from towline_dev.controlplane import ControlPlane
from towline_dev.images import RUNNER_IMAGE
from towline_dev.install import OPERATOR_NAMESPACE, OperatorProcess
from towline_dev.node.layout import KUBERNETES_SERVICE_IP

LEASE = "towline-operator"
LEASE_SECONDS, RENEW_DEADLINE_SECONDS, RETRY_PERIOD_SECONDS = 6, 4, 1
"""Short, so a paused or killed leader is replaced within seconds."""


def chaos_settings(shards: int = 1, replicas: int = 2) -> dict[str, str]:
    return {
        "TOWLINE_SHARDS": str(shards),
        "TOWLINE_REPLICAS": str(replicas),
        "TOWLINE_RUNNER_COMMAND": "",  # the image's own runner, in a real container
        "TOWLINE_RUNNER_IMAGE": RUNNER_IMAGE,
        "TOWLINE_REQUIRE_ISOLATION": "true",
        "TOWLINE_ISOLATION_PROBE": f"{KUBERNETES_SERVICE_IP}:443",
        "TOWLINE_LEASE_DURATION_SECONDS": str(LEASE_SECONDS),
        "TOWLINE_LEASE_RENEW_DEADLINE_SECONDS": str(RENEW_DEADLINE_SECONDS),
        "TOWLINE_LEASE_RETRY_PERIOD_SECONDS": str(RETRY_PERIOD_SECONDS),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Replicas:
    """Operator processes sharing one Lease (or, with shards, the Lease of the scenario namespace's shard); a killed
    one is started again, as a Deployment would."""

    plane: ControlPlane
    kubeconfig: Path
    log_dir: Path
    count: int = 2
    shards: int = 1
    namespace: str = "towline-chaos"
    """Where the runs are: its shard's Lease holder is the one killed and paused."""
    processes: list[OperatorProcess] = field(default_factory=list)
    spent_cpu: float = 0.0
    """CPU seconds of processes already gone (killed or stopped)."""
    exits: list[str] = field(default_factory=list)
    """Replicas that exited by themselves (not killed) and were started again."""
    _killed: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Replicas:
        self.processes = [
            OperatorProcess(kubeconfig=self.kubeconfig, log_path=self.log_dir / f"operator-{index}.log",
                            identity=f"towline-chaos-{index}",
                            settings=chaos_settings(self.shards, self.count)).start()
            for index in range(self.count)
        ]
        return self

    @property
    def lease(self) -> str:
        return shard_lease_name(LEASE, shard_of(self.namespace, self.shards), self.shards)

    def holder(self) -> str | None:
        """The Lease holder's identity as the API server has it; None while it cannot say."""
        try:
            status, body = self.plane.api_get(
                f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/{self.lease}")
        except OSError:
            return None
        if status != 200:
            return None
        holder: str | None = json.loads(body).get("spec", {}).get("holderIdentity")
        return holder

    def leader(self) -> OperatorProcess | None:
        holder = self.holder()
        return next((p for p in self.processes if p.identity == holder), None)

    def kill(self, replica: OperatorProcess) -> None:
        with self._lock:
            self._killed.add(replica.identity)
            self.spent_cpu += self._cpu(replica)
            replica.kill()

    def restart(self, replica: OperatorProcess) -> None:
        with self._lock:
            self._killed.discard(replica.identity)
            replica.start()

    def revive_exited(self) -> None:
        """Start again a replica that exited by itself, as a Deployment's kubelet would."""
        with self._lock:
            for replica in self.processes:
                if replica.identity in self._killed or replica.process is None or replica.process.poll() is None:
                    continue
                self.exits.append(f"{replica.identity} (status {replica.process.returncode})")
                replica.start()

    def cpu_seconds(self) -> float:
        return self.spent_cpu + sum(self._cpu(p) for p in self.processes)

    def all_running(self) -> bool:
        return all(p.process is not None and p.process.poll() is None for p in self.processes)

    def stop(self) -> None:
        for replica in self.processes:
            self.spent_cpu += self._cpu(replica)
            replica.resume()
            replica.stop()

    @staticmethod
    def _cpu(replica: OperatorProcess) -> float:
        return cpu_seconds(replica.process.pid) if replica.process and replica.process.poll() is None else 0.0

"""An existing cluster in the place of the local control plane (`TOWLINE_TEST_KUBECONFIG`).

Like controller-runtime envtest's `UseExistingCluster`: the integration tests run
against a cluster you name instead of starting etcd and kube-apiserver here. The
kubeconfig's current (or `TOWLINE_TEST_CONTEXT`) context must be allowed to do
everything, impersonation included: the people the tests act as (alice, bob,
carol) are that identity impersonating them, with the same groups as on the local
control plane, so RBAC and the admission policies see exactly those users.

Nothing is started or stopped; the tests' namespaces are theirs to delete.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from towline_dev.binaries import BinarySet
from towline_dev.controlplane import ControlPlane, ControlPlaneError
from towline_dev.kubeconfig import PEOPLE, context_name, write_kubeconfig, write_private_file

ENVIRONMENT_VARIABLE = "TOWLINE_TEST_KUBECONFIG"


def existing_cluster_from_environment(binaries: BinarySet) -> ExistingCluster | None:
    """The cluster `TOWLINE_TEST_KUBECONFIG` names, checked reachable; None when it is unset."""
    source = os.environ.get(ENVIRONMENT_VARIABLE)
    if not source:
        return None
    return ExistingCluster(binaries, Path(source), context=os.environ.get("TOWLINE_TEST_CONTEXT")).start()


class ExistingCluster(ControlPlane):
    """A ControlPlane whose components run elsewhere: same kubeconfig contexts, same `kubectl`."""

    def __init__(self, binaries: BinarySet, source_kubeconfig: Path, *, context: str | None = None) -> None:
        super().__init__(binaries, Path(tempfile.mkdtemp(prefix="towline-existing-")),
                         install_signal_handlers=False)
        self.source_kubeconfig = source_kubeconfig
        self.context = context
        self._server = ""

    @property
    def server(self) -> str:
        return self._server

    def start(self) -> ExistingCluster:
        """Write the people's kubeconfig (admin as is, the others impersonated) and check the cluster answers."""
        if not self.source_kubeconfig.is_file():
            raise ControlPlaneError(f"{ENVIRONMENT_VARIABLE}={self.source_kubeconfig} is not a file; "
                                    "point it at a kubeconfig whose context may do everything")
        argv = [str(self.binaries.path("kubectl")), "--kubeconfig", str(self.source_kubeconfig),
                "config", "view", "--raw", "--flatten", "--minify", "-o", "json"]
        if self.context:
            argv += ["--context", self.context]
        view = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if view.returncode != 0:
            raise ControlPlaneError(f"cannot read {self.source_kubeconfig}: {view.stderr.strip()}")
        self._prepare_state_dir()
        write_kubeconfig(self.kubeconfig, self._people_kubeconfig(json.loads(view.stdout)))
        answer = self.kubectl("auth", "can-i", "impersonate", "users", check=False)
        if answer.stdout.strip() != "yes":
            raise ControlPlaneError(
                f"the context of {self.source_kubeconfig} may not impersonate users, which the tests need to "
                f"act as alice, bob and carol: {answer.stdout.strip()} {answer.stderr.strip()}")
        self.startup_seconds = 0.0
        return self

    def _people_kubeconfig(self, flat: dict[str, Any]) -> dict[str, Any]:
        cluster = flat["clusters"][0]["cluster"]
        self._server = str(cluster["server"])
        authority = cluster.get("certificate-authority-data")
        if authority:
            write_private_file(self.ca_cert, base64.b64decode(authority).decode())
        admin = flat["users"][0]["user"]
        users = [{"name": "admin", "user": admin}]
        users += [{"name": person.name, "user": {**admin, "as": person.name, "as-groups": list(person.groups)}}
                  for person in PEOPLE if person.name != "admin"]
        return {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "existing", "cluster": cluster}],
            "users": users,
            "contexts": [{"name": context_name(u["name"]), "context": {"cluster": "existing", "user": u["name"]}}
                         for u in users],
            "current-context": context_name("admin"),
        }

    def stop(self) -> None:
        """Nothing runs here to stop."""

    def is_running(self) -> bool:
        return True

    def api_request(
        self, method: str, path: str, *, body: bytes | None = None, user: str = "admin", timeout: float = 5.0,
        token: str | None = None,
    ) -> tuple[int, bytes]:
        """GETs through `kubectl get --raw` (the cluster's own credentials, whatever they are); other requests,
        and any with a `token` of its own, answer 501, and their callers use kubectl itself."""
        if method != "GET" or token is not None:
            return 501, b"not sent: only GETs go to an existing cluster this way"
        result = self.kubectl("get", "--raw", path, user=user, check=False, timeout=timeout + 30)
        return (200, result.stdout.encode()) if result.returncode == 0 else (500, result.stderr.encode())

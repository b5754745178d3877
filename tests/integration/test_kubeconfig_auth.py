"""`kubectl towline` against the real API server with each way a kubeconfig authenticates: a credential plugin
(`exec`, as EKS's and GKE's kubeconfigs), a client certificate, a token file. And what must fail: a server
whose certificate the kubeconfig's CA did not sign, a CA together with insecure-skip-tls-verify, a plugin's
token the API server does not accept. Each failure is one line naming the cause, never a token's value."""

from __future__ import annotations

import base64
import datetime
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from tests.integration.support import wait_for

from towline_dev.certs import _ca, issue_leaf, load_ca
from towline_dev.controlplane import ControlPlane

BIN = Path(sys.executable).parent

EXEC_PLUGIN = """import json, sys
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": sys.argv[1]}}))
"""


def carol_token(cluster: ControlPlane) -> str:
    document = yaml.safe_load(cluster.kubeconfig.read_text())
    return str(next(entry["user"]["token"] for entry in document["users"] if entry["name"] == "carol"))


def kubeconfig_as(path: Path, cluster: ControlPlane, user: dict[str, Any],
                  cluster_entry: dict[str, Any] | None = None) -> Path:
    """The plane's server and CA (or `cluster_entry`), with `user` as the one user."""
    entry = cluster_entry or {"server": cluster.server,
                              "certificate-authority-data": base64.b64encode(cluster.ca_cert.read_bytes()).decode()}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "me",
        "clusters": [{"name": "plane", "cluster": entry}], "users": [{"name": "me", "user": user}],
        "contexts": [{"name": "me", "context": {"cluster": "plane", "user": "me"}}],
    }))
    path.chmod(0o600)
    return path


def towline(kubeconfig: Path, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "kubectl-towline"), "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
                          capture_output=True, text=True, timeout=120, check=False)


def acts_as_carol(kubeconfig: Path, team_namespace: str) -> None:
    """carol lists runs where she may, and the API server names her where she may not."""
    def listed() -> subprocess.CompletedProcess[str] | None:
        result = towline(kubeconfig, team_namespace, "runs")
        # Right after the CRDs are installed their storage may still be starting (429 for a moment).
        return None if "storage is (re)initializing" in result.stderr else result

    allowed = wait_for("the WorkflowRun API to serve", listed)
    assert allowed.returncode == 0, allowed.stderr
    refused = towline(kubeconfig, "default", "runs")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert 'User "carol" cannot list resource "workflowruns"' in refused.stderr, refused.stderr


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, f"exit {result.returncode}: {result.stdout}\n{result.stderr}"
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def test_an_exec_credential_plugin_kubeconfig_acts_as_its_user(towline_installed: ControlPlane,
                                                               team_namespace: str, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXEC_PLUGIN)

    def with_token(token: str) -> Path:
        return kubeconfig_as(tmp_path / f"exec-{len(token)}", towline_installed, {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
            "args": [str(plugin), token]}})

    acts_as_carol(with_token(carol_token(towline_installed)), team_namespace)
    refused = one_line(towline(with_token("not-a-token-the-server-knows"), team_namespace, "runs"))
    assert refused.startswith("error: unauthorized (401)") and "not-a-token" not in refused


def test_a_client_certificate_and_a_token_file_kubeconfig_act_as_their_user(towline_installed: ControlPlane,
                                                                           team_namespace: str,
                                                                           tmp_path: Path) -> None:
    ca_key, ca_cert = load_ca(towline_installed.pki_dir)
    key, cert = issue_leaf(datetime.datetime.now(datetime.UTC), ca_key, ca_cert, common_name="carol")
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    from_data = kubeconfig_as(tmp_path / "cert", towline_installed, {
        "client-certificate-data": base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode(),
        "client-key-data": base64.b64encode(key_pem).decode()})
    acts_as_carol(from_data, team_namespace)
    token_file = tmp_path / "token"
    token_file.write_text(carol_token(towline_installed) + "\n")
    acts_as_carol(kubeconfig_as(tmp_path / "token-file", towline_installed, {"tokenFile": "token"}), team_namespace)


def test_tls_is_verified_a_wrong_ca_fails_clearly_and_skip_verify_never_sits_beside_a_ca(
    towline_installed: ControlPlane, team_namespace: str, tmp_path: Path
) -> None:
    """The attacker's seat: a server (here the plane, whose certificate another CA signed) that the kubeconfig's
    CA does not vouch for gets no request and no token."""
    _, other_ca = _ca(datetime.datetime.now(datetime.UTC), "someone-elses-ca")
    other_pem = base64.b64encode(other_ca.public_bytes(serialization.Encoding.PEM)).decode()
    wrong_ca = kubeconfig_as(tmp_path / "wrong-ca", towline_installed, {"token": carol_token(towline_installed)},
                             {"server": towline_installed.server, "certificate-authority-data": other_pem})
    untrusted = one_line(towline(wrong_ca, team_namespace, "runs"))
    assert "certificate is not trusted" in untrusted and "certificate verify failed" in untrusted, untrusted
    assert carol_token(towline_installed) not in untrusted
    # No CA at all: the system's roots do not vouch for the plane either.
    system_roots = kubeconfig_as(tmp_path / "system-roots", towline_installed,
                                 {"token": carol_token(towline_installed)}, {"server": towline_installed.server})
    assert "certificate verify failed" in one_line(towline(system_roots, team_namespace, "runs"))
    both = kubeconfig_as(tmp_path / "both", towline_installed, {"token": carol_token(towline_installed)},
                         {"server": towline_installed.server, "certificate-authority-data": other_pem,
                          "insecure-skip-tls-verify": True})
    assert "insecure-skip-tls-verify is set together with a certificate-authority" in \
        one_line(towline(both, team_namespace, "runs"))

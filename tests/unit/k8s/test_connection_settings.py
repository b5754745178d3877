"""The connection a kubeconfig or a pod's service account describes, built without kubernetes-asyncio: TLS trust
and client certificates, the credential of each request (a token file read again as it rotates), and kubectl's
refusals; a credential plugin (`exec`) goes through kubernetes-asyncio's loader, loaded only then. Real sockets
where a request is made: a loopback server that records each request's Authorization header."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from towline.k8s import kubeconfig
from towline.k8s.client import ApiUnavailable, KubeApi
from towline.k8s.connection import ConnectionProblem, TokenFile, in_cluster
from towline_dev.certs import _ca, issue_leaf


class Recorder(BaseHTTPRequestHandler):
    authorizations: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        Recorder.authorizations.append(self.headers.get("Authorization"))
        payload = b'{"kind": "Namespace"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Recorder.authorizations.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def write_config(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return path


def authorizations(config: Path, requests: int = 1) -> list[str | None]:
    async def scenario() -> None:
        api = await KubeApi.connect(str(config))
        try:
            for _ in range(requests):
                await api.request("GET", "/api/v1/namespaces/default")
        finally:
            await api.close()

    asyncio.run(scenario())
    return list(Recorder.authorizations)


def load(config: Path) -> Any:
    return asyncio.run(kubeconfig.load(str(config), None))


def pem_pair() -> tuple[bytes, bytes, bytes]:
    """A CA's certificate, and a client certificate it signed with that certificate's key (PEM)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = _ca(now)
    key, cert = issue_leaf(now, ca_key, ca_cert, common_name="carol")
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    encoding = serialization.Encoding.PEM
    return ca_cert.public_bytes(encoding), cert.public_bytes(encoding), key_pem


def test_a_token_and_a_token_file_are_sent_and_the_token_wins_as_in_kubectl(server: str, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-the-file\n")
    both = write_config(tmp_path / "both", {"server": server}, {"token": "inline", "tokenFile": "token"})
    assert authorizations(both) == ["Bearer inline"]
    Recorder.authorizations.clear()
    # A relative tokenFile is relative to the kubeconfig's own directory, wherever the process runs.
    only_file = write_config(tmp_path / "file", {"server": server}, {"tokenFile": "token"})
    assert authorizations(only_file) == ["Bearer from-the-file"]


def test_a_token_file_is_read_again_once_a_minute_and_a_failed_read_keeps_the_last_token(tmp_path: Path) -> None:
    """As client-go's cached file token source: a rotated projected service account token is picked up."""
    path = tmp_path / "token"
    path.write_text("first")
    now = [0.0]
    token = TokenFile(path, clock=lambda: now[0])
    path.write_text("second")
    assert asyncio.run(token.authorization()) == "Bearer first"
    now[0] = 60.0
    assert asyncio.run(token.authorization()) == "Bearer second"
    path.unlink()
    now[0] = 120.0
    assert asyncio.run(token.authorization()) == "Bearer second"
    assert "second" not in repr(token)


def test_a_token_file_problem_names_the_file_never_its_content(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    config = write_config(tmp_path / "config", {"server": "https://127.0.0.1:1"}, {"tokenFile": str(secret)})
    with pytest.raises(ConnectionProblem, match=f"user u: cannot read the token file {secret}: No such file"):
        load(config)
    secret.write_text("\n")
    with pytest.raises(ConnectionProblem, match=f"the token file {secret} is empty"):
        load(config)
    # Two lines would be a header injection in any request; the refusal quotes none of it.
    secret.write_text("s3cr3t-token-value\nX-Injected: yes\n")
    with pytest.raises(ConnectionProblem, match="holds more than one token") as raised:
        load(config)
    assert "s3cr3t" not in str(raised.value) and "Injected" not in str(raised.value)


def test_a_client_certificate_from_data_or_files_is_presented_and_a_ca_is_trusted(tmp_path: Path) -> None:
    ca_pem, cert_pem, key_pem = pem_pair()
    b64 = {name: base64.b64encode(value).decode() for name, value in
           (("ca", ca_pem), ("cert", cert_pem), ("key", key_pem))}
    from_data = load(write_config(tmp_path / "data", {"server": "https://127.0.0.1:6443",
                                                      "certificate-authority-data": b64["ca"]},
                                  {"client-certificate-data": b64["cert"], "client-key-data": b64["key"]}))
    (tmp_path / "pki").mkdir()
    for name, value in (("ca.crt", ca_pem), ("carol.crt", cert_pem), ("carol.key", key_pem)):
        (tmp_path / "pki" / name).write_bytes(value)
    from_files = load(write_config(tmp_path / "files", {"server": "https://127.0.0.1:6443",
                                                        "certificate-authority": "pki/ca.crt"},
                                   {"client-certificate": "pki/carol.crt", "client-key": "pki/carol.key"}))
    for connection in (from_data, from_files):
        assert connection.tls.verify_mode == ssl.CERT_REQUIRED and connection.tls.check_hostname
        assert [cert["subject"] for cert in connection.tls.get_ca_certs()] == [((("commonName", "towline-dev-ca"),),)]


@pytest.mark.parametrize(("cluster", "user", "message"), [
    ({"server": "https://h:6443", "insecure-skip-tls-verify": True, "certificate-authority-data": "Zm9v"}, {},
     "insecure-skip-tls-verify is set together with a certificate-authority; remove one of them"),
    ({"server": "https://h:6443", "certificate-authority-data": "not base64!"}, {},
     "cluster k: certificate-authority-data is not base64"),
    ({"server": "https://h:6443", "certificate-authority-data": base64.b64encode(b"junk").decode()}, {},
     "cannot load the API server's CA certificate"),
    ({"server": "https://h:6443", "certificate-authority": "missing.crt"}, {},
     "cannot load the API server's CA certificate"),
    ({"server": "https://h:6443"}, {"client-certificate-data": base64.b64encode(b"x").decode()},
     "needs both the certificate and its key"),
    ({}, {"token": "t"}, "cluster k: no server; set clusters"),
])
def test_settings_that_make_no_connection_are_refused_naming_the_field(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], message: str
) -> None:
    with pytest.raises(kubeconfig.KubeconfigProblem) as raised:
        load(write_config(tmp_path / "config", cluster, user))
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_kubeconfig_without_current_context_or_with_a_dangling_cluster_says_the_fix(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config", {"server": "https://h:6443"}, {})
    document = yaml.safe_load(config.read_text())
    del document["current-context"]
    config.write_text(yaml.safe_dump(document))
    with pytest.raises(kubeconfig.KubeconfigProblem, match="no current-context is set; pass --context NAME"):
        load(config)
    document["contexts"][0]["context"]["cluster"] = "gone"
    config.write_text(yaml.safe_dump(document))
    with pytest.raises(kubeconfig.KubeconfigProblem, match="context c names the cluster 'gone', which no clusters"):
        asyncio.run(kubeconfig.load(str(config), "c"))


def test_in_cluster_reads_the_service_account_and_names_what_is_missing(tmp_path: Path) -> None:
    ca_pem, _, _ = pem_pair()
    (tmp_path / "ca.crt").write_bytes(ca_pem)
    (tmp_path / "token").write_text("pod-token")
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    connection = in_cluster(tmp_path, environ)
    assert connection.server == "https://[fd00::1]:443"
    assert asyncio.run(connection.credential.authorization()) == "Bearer pod-token"
    with pytest.raises(ConnectionProblem, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"):
        in_cluster(tmp_path, {})
    (tmp_path / "ca.crt").unlink()
    with pytest.raises(ConnectionProblem, match=r"CA certificate .*ca.crt is missing"):
        in_cluster(tmp_path, environ)


EXEC_PLUGIN = """import json, os, sys
count = os.environ["COUNT_FILE"]
runs = int(open(count).read() or 0) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(runs))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": f"plugin-token-{runs}", "expirationTimestamp": os.environ["EXPIRES"]}}))
"""


def exec_config(tmp_path: Path, server: str, expires: str) -> Path:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(EXEC_PLUGIN)
    return write_config(tmp_path / "exec", {"server": server}, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable, "args": [str(plugin)],
        "env": [{"name": "COUNT_FILE", "value": str(tmp_path / "runs")}, {"name": "EXPIRES", "value": expires}],
    }})


def test_an_exec_credential_plugin_gives_the_token_and_runs_again_once_it_expired(server: str,
                                                                               tmp_path: Path) -> None:
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert authorizations(exec_config(tmp_path, server, later), requests=2) == ["Bearer plugin-token-1"] * 2
    Recorder.authorizations.clear()
    (tmp_path / "runs").unlink()
    expired = "2020-01-01T00:00:00Z"
    assert authorizations(exec_config(tmp_path, server, expired), requests=2) == \
        ["Bearer plugin-token-2", "Bearer plugin-token-3"]


def test_kubernetes_asyncio_is_loaded_only_for_a_credential_plugin(server: str, tmp_path: Path) -> None:
    """The fact, in a fresh interpreter: a token kubeconfig's request loads none of it; an exec one loads it."""
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    plain = write_config(tmp_path / "plain", {"server": server}, {"token": "t"})
    plugin = exec_config(tmp_path, server, later)
    script = (
        "import asyncio, json, sys\n"
        "from towline.k8s.client import KubeApi\n"
        "async def call(path):\n"
        "    api = await KubeApi.connect(path)\n"
        "    try:\n"
        "        await api.request('GET', '/api/v1/namespaces/default')\n"
        "    finally:\n"
        "        await api.close()\n"
        "seen = []\n"
        "for path in sys.argv[1:]:\n"
        "    asyncio.run(call(path))\n"
        "    seen.append('kubernetes_asyncio' in sys.modules)\n"
        "print(json.dumps(seen))\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(plain), str(plugin)], capture_output=True, text=True,
                            check=True, timeout=60)
    assert json.loads(result.stdout) == [False, True]


def serving_pair(directory: Path, ca_key: Any, ca_cert: Any) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    key, cert = issue_leaf(datetime.datetime.now(datetime.UTC), ca_key, ca_cert, common_name="api",
                           server_ips=("127.0.0.1",))
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """A loopback HTTPS server whose certificate its own CA signed: (its URL, that CA's PEM)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    Recorder.authorizations.clear()
    ca_key, ca_cert = _ca(datetime.datetime.now(datetime.UTC), "the-servers-ca")
    cert_path, key_path = serving_pair(tmp_path, ca_key, ca_cert)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}", ca_cert.public_bytes(serialization.Encoding.PEM)
    httpd.shutdown()
    httpd.server_close()


def test_a_server_the_kubeconfigs_ca_did_not_sign_gets_no_request_and_no_token(
    tls_server: tuple[str, bytes], tmp_path: Path
) -> None:
    """The attacker's seat: whoever answers at the server's address with a certificate the kubeconfig's CA did
    not sign (here the CA of the kubeconfig is another one, as a server in the middle would present)."""
    url, servers_ca = tls_server
    other_ca = pem_pair()[0]
    for name, ca in (("other", other_ca), ("none", None)):
        cluster = {"server": url} | ({"certificate-authority-data": base64.b64encode(ca).decode()} if ca else {})
        config = write_config(tmp_path / name, cluster, {"token": "s3cr3t"})
        with pytest.raises(ApiUnavailable, match="certificate is not trusted") as raised:
            authorizations(config)
        assert "s3cr3t" not in str(raised.value)
    assert Recorder.authorizations == [], "no request reached the server"
    trusted = write_config(tmp_path / "trusted", {"server": url,
                                                  "certificate-authority-data": base64.b64encode(servers_ca).decode()},
                           {"token": "s3cr3t"})
    assert authorizations(trusted) == ["Bearer s3cr3t"]

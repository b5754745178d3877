"""The tests' OpenID Connect provider as processes: Hydra and the login app, in the test hosts' network namespace.

`IdentityProvider(plane_state_dir).start()` serves `ISSUER_URL` (Hydra's public endpoints, HTTPS with a serving
certificate the control plane's CA signs, which the API server's authentication config names) and `LOGIN_APP_URL`
(towline_dev.idp.loginapp). Hydra's admin API listens only on a Unix socket in the state directory, mode 0600: a
pod on the node, which reaches the issuer's address, cannot accept a login or register a client; this process and
the login app (root, on the machine) can. Everything lives in memory and in `<plane state>/idp/`; `stop()` ends
both processes. Another process (a test worker) uses a running one with `attach`.

The people's passwords are new at each start, kept in the state directory (0600): nobody outside this machine's
root can sign in as bob.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.client
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization

from towline_dev.certs import issue_leaf, load_ca, write_key_pair
from towline_dev.idp.hydra import find_hydra
from towline_dev.idp.issuer import (
    ISSUER_ADDRESS,
    ISSUER_PORT,
    ISSUER_URL,
    LOGIN_APP_PORT,
    LOGIN_APP_URL,
    PEOPLE,
    WEB_VIEW_CLIENT_ID,
)
from towline_dev.kubeconfig import write_private_file
from towline_dev.node.probehosts import NAMESPACE, TestHostNetwork
from towline_dev.processes import spawn, stop_process, wait_for

STATE = "state.json"
"""The start's secrets (passwords, the client secret seed), 0600: what `attach` and the login app read."""


class ProviderError(RuntimeError):
    """The provider did not start or refused an admin request; the message says what and where its log is."""


@dataclass(frozen=True)
class OAuthClient:
    """An OAuth2 client registered at the provider: what an app signs people in with."""

    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: Hydra's admin API."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("hydra-admin", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self._path))


class IdentityProvider:
    """Hydra and the login app for one control plane (its CA signs the provider's certificate)."""

    def __init__(self, plane_state_dir: Path, *, hydra: Path | None = None) -> None:
        self.plane_state_dir = plane_state_dir
        self.state_dir = plane_state_dir / "idp"
        self._hydra = hydra
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._network = TestHostNetwork()
        self._state: dict[str, Any] = {}
        self.startup_seconds: float | None = None
        """Wall time of the last `start()`: nothing to both answering (the build not counted)."""

    issuer = ISSUER_URL
    login_app = LOGIN_APP_URL

    # -- paths and facts ----------------------------------------------------------------------

    @property
    def ca_bundle(self) -> Path:
        """The CA that signed the provider's certificate (the control plane's): trust it to reach `issuer`."""
        return self.state_dir / "ca.crt"

    @property
    def admin_socket(self) -> Path:
        return self.state_dir / "admin.sock"

    @property
    def logs_dir(self) -> Path:
        """Under the plane's logs, so a failed test keeps them with the control plane's."""
        return self.plane_state_dir / "logs" / "idp"

    def password(self, name: str) -> str:
        """The password of test person `name` for this start."""
        people: dict[str, dict[str, Any]] = self._state["people"]
        if name not in people:
            raise KeyError(f"no test person {name!r}: the provider knows {', '.join(sorted(people))}")
        return str(people[name]["password"])

    @property
    def spki_pin(self) -> str:
        """base64 SHA-256 of the serving certificate's public key: Chromium's `--ignore-certificate-errors-spki-list`
        takes it, so a browser trusts this certificate (and no other unknown one) without a CA store."""
        return str(self._state["spki_pin"])

    def chromium_arguments(self) -> list[str]:
        """Flags for a headless Chromium that must reach `issuer` and `login_app`."""
        return [f"--ignore-certificate-errors-spki-list={self.spki_pin}"]

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> IdentityProvider:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @classmethod
    def attach(cls, plane_state_dir: Path) -> IdentityProvider:
        """The provider another process started for this plane, to use but not to stop."""
        provider = cls(plane_state_dir)
        state_file = provider.state_dir / STATE
        if not state_file.is_file():
            raise ProviderError(f"no identity provider runs for {plane_state_dir} ({state_file} is missing)")
        provider._state = json.loads(state_file.read_text())
        return provider

    def start(self) -> IdentityProvider:
        started = time.monotonic()
        hydra = self._hydra or find_hydra()
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)
        self._network.start()
        self._network.add([ISSUER_ADDRESS])
        self._write_certificate()
        self._state = {
            "people": {p.name: {"password": secrets.token_urlsafe(12), "groups": list(p.groups)} for p in PEOPLE},
            "client_secret_seed": secrets.token_hex(32),
            "spki_pin": self._spki_pin(),
            "admin_socket": str(self.admin_socket),
        }
        write_private_file(self.state_dir / STATE, json.dumps(self._state))
        write_private_file(self.state_dir / "hydra.yaml", yaml.safe_dump(self._hydra_config()))
        inside = ["ip", "netns", "exec", NAMESPACE]
        try:
            self._processes["hydra"] = spawn(
                [*inside, str(hydra), "serve", "all", "--config", str(self.state_dir / "hydra.yaml"), "--sqa-opt-out"],
                log_path=self.logs_dir / "hydra.log", env={**os.environ, "SQA_OPT_OUT": "true"},  # and no usage reports
            )
            self._processes["loginapp"] = spawn(
                [*inside, sys.executable, "-m", "towline_dev.idp.loginapp", str(self.state_dir)],
                log_path=self.logs_dir / "loginapp.log",
            )
            self._wait("Hydra's admin API", lambda: self._ready(lambda: self.admin("GET", "/health/ready")[0] == 200))
            self._wait("the issuer's discovery document", lambda: self._ready(self._discovery_served))
            # Hydra makes its ID token signing key on first use; two first sign-ins at once (test workers) race to
            # make it and one fails with 500. Asking for the published keys makes it now, once.
            self._wait("the issuer's signing keys", lambda: self._ready(self._keys_published))
            self._wait("the login app", lambda: self._ready(self._login_app_served))
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        for process in self._processes.values():
            stop_process(process, grace_seconds=5)
        self._processes = {}
        self._network.stop()

    def copy_logs(self, destination: Path) -> None:
        if self.logs_dir.exists():
            shutil.copytree(self.logs_dir, destination, dirs_exist_ok=True)

    # -- clients ------------------------------------------------------------------------------

    def register_client(
        self, redirect_uris: tuple[str, ...] | list[str], *, client_id: str = WEB_VIEW_CLIENT_ID,
        id_token_lifespan: str | None = None,
    ) -> OAuthClient:
        """An OAuth2 client (authorization code, PKCE welcome, `client_secret_basic`) allowed these redirect URIs.

        The web view's client (`WEB_VIEW_CLIENT_ID`, the one audience the API server accepts) is one for every
        test: a second registration adds its redirect URIs and returns the same secret. Another `client_id` makes
        a client whose ID tokens the API server refuses. `id_token_lifespan` ("10s") shortens its ID tokens' life.
        """
        if not redirect_uris or not all(uri.startswith(("https://", "http://")) for uri in redirect_uris):
            raise ValueError(f"redirect_uris: {list(redirect_uris)!r}; give one or more absolute http(s) URLs")
        secret = hashlib.sha256(f"{self._state['client_secret_seed']}:{client_id}".encode()).hexdigest()
        body = {
            "client_id": client_id, "client_name": client_id, "client_secret": secret,
            "redirect_uris": list(redirect_uris), "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"], "scope": "openid profile email groups offline_access",
            "token_endpoint_auth_method": "client_secret_basic",
        }
        status, answer = self.admin("POST", "/admin/clients", body)
        if status == 409:
            status, answer = self.admin("GET", f"/admin/clients/{client_id}")
            known = list(answer.get("redirect_uris") or []) if status == 200 else []
            added = [uri for uri in redirect_uris if uri not in known]
            if added:
                patch = [{"op": "add", "path": "/redirect_uris/-", "value": uri} for uri in added]
                status, answer = self.admin("PATCH", f"/admin/clients/{client_id}", patch)
        if status not in {200, 201}:
            raise ProviderError(f"registering client {client_id}: Hydra answered {status}: {answer}")
        if id_token_lifespan is not None:
            lifespans = {"authorization_code_grant_id_token_lifespan": id_token_lifespan}
            status, answer = self.admin("PUT", f"/admin/clients/{client_id}/lifespans", lifespans)
            if status != 200:
                raise ProviderError(f"setting {client_id}'s ID token lifespan: Hydra answered {status}: {answer}")
        # The caller's own URIs first: a sign-in without a redirect_uri of its own uses the first, and another test
        # (another worker, on the same shared client) may have registered its URIs before this one.
        known = [uri for uri in answer.get("redirect_uris") or [] if uri not in redirect_uris]
        return OAuthClient(client_id, secret, (*redirect_uris, *known))

    def admin(self, method: str, path: str, body: Any = None, *, timeout: float = 10.0) -> tuple[int, Any]:
        """One request to Hydra's admin API (over its Unix socket): the status and the decoded JSON answer."""
        connection = _UnixConnection(Path(self._state.get("admin_socket") or self.admin_socket), timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        return response.status, (json.loads(raw) if raw.strip() else None)

    # -- internals ----------------------------------------------------------------------------

    def _write_certificate(self) -> None:
        ca_key, ca_cert = load_ca(self.plane_state_dir / "pki")
        key, cert = issue_leaf(
            datetime.datetime.now(datetime.UTC), ca_key, ca_cert, common_name="towline-test-issuer",
            server_ips=(ISSUER_ADDRESS,),
        )
        write_key_pair(self.state_dir / "tls.crt", self.state_dir / "tls.key", key, cert)
        shutil.copyfile(self.plane_state_dir / "pki" / "ca.crt", self.ca_bundle)

    def _spki_pin(self) -> str:
        from cryptography import x509  # noqa: PLC0415 - only here

        cert = x509.load_pem_x509_certificate((self.state_dir / "tls.crt").read_bytes())
        spki = cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(hashlib.sha256(spki).digest()).decode("ascii")

    def _hydra_config(self) -> dict[str, Any]:
        tls = {"enabled": True, "cert": {"path": str(self.state_dir / "tls.crt")},
               "key": {"path": str(self.state_dir / "tls.key")}}
        return {
            "dsn": "memory",
            "serve": {
                "public": {"host": ISSUER_ADDRESS, "port": ISSUER_PORT, "tls": tls,
                           "request_log": {"disable_for_health": True}},
                "admin": {"host": f"unix:{self.admin_socket}", "socket": {"mode": 0o600},
                          "tls": {"enabled": False}, "request_log": {"disable_for_health": True}},
                "cookies": {"same_site_mode": "Lax"},
            },
            "urls": {
                "self": {"issuer": ISSUER_URL, "public": ISSUER_URL},
                "login": f"{LOGIN_APP_URL}/login",
                "consent": f"{LOGIN_APP_URL}/consent",
                "error": f"{LOGIN_APP_URL}/error",
            },
            "secrets": {"system": [secrets.token_urlsafe(32)]},
            "oidc": {"subject_identifiers": {"supported_types": ["public"]}},
            "strategies": {"access_token": "opaque"},
            "ttl": {"id_token": "1h", "access_token": "1h"},
            "log": {"level": "info", "leak_sensitive_values": False},
        }

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_bundle))

    def _discovery_served(self) -> bool:
        connection = http.client.HTTPSConnection(ISSUER_ADDRESS, ISSUER_PORT, context=self._ssl_context(), timeout=2)
        try:
            connection.request("GET", "/.well-known/openid-configuration")
            response = connection.getresponse()
            return response.status == 200 and json.loads(response.read()).get("issuer") == ISSUER_URL
        finally:
            connection.close()

    def _keys_published(self) -> bool:
        connection = http.client.HTTPSConnection(ISSUER_ADDRESS, ISSUER_PORT, context=self._ssl_context(), timeout=10)
        try:
            connection.request("GET", "/.well-known/jwks.json")
            response = connection.getresponse()
            return response.status == 200 and bool(json.loads(response.read()).get("keys"))
        finally:
            connection.close()

    def _login_app_served(self) -> bool:
        connection = http.client.HTTPSConnection(ISSUER_ADDRESS, LOGIN_APP_PORT, context=self._ssl_context(),
                                                 timeout=2)
        try:
            connection.request("GET", "/healthz")
            return connection.getresponse().status == 200
        finally:
            connection.close()

    def _ready(self, probe: Any) -> bool:
        for name, process in self._processes.items():
            if process.poll() is not None:
                log = self.logs_dir / f"{name}.log"
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
                raise ProviderError(f"{name} exited with status {process.returncode}; last lines of {log}:\n{tail}")
        try:
            return bool(probe())
        except (OSError, http.client.HTTPException, ValueError):
            return False

    def _wait(self, what: str, ready: Any) -> None:
        try:
            wait_for(ready, timeout=180, interval=0.1, what=what)  # minutes on a machine loaded tenfold
        except TimeoutError as error:
            raise ProviderError(f"{error}; logs in {self.logs_dir}") from None

"""How a process reaches the API server: its address, the TLS trust and client certificate, the credential each
request carries, and the proxy, if any.

Built from the pod's service account (`in_cluster`) or from a kubeconfig (`towline.k8s.kubeconfig`), and used by
`KubeApi` over aiohttp directly: no process needs kubernetes-asyncio's generated client (844 modules, 47 MiB)
to talk to the API server. Only a kubeconfig whose user runs a credential plugin (`exec`) or names an
`auth-provider` loads that library, lazily (`towline.k8s.kubeconfigplugins`).

TLS is verified unless a kubeconfig says `insecure-skip-tls-verify: true` (and then names no CA: kubectl refuses
both together, and so does Towline). A token file is re-read once a minute, as client-go does, so a projected
service account token that the kubelet rotates is picked up. Never writes a token's value into a log line or an
error message: a problem names the file and the fix.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
"""client-go's cached token file source re-reads its file once a minute; the kubelet renews a projected token
well before it expires (at 80 % of its life)."""


class ConnectionProblem(Exception):  # noqa: N818 - what the person sees: the connection settings are the problem
    """Settings that cannot make a connection: a missing file, an unreadable certificate, a token file with
    nothing in it."""


class Credential(Protocol):
    async def authorization(self) -> str | None:
        """The Authorization header value for the next request, or None to send none."""


@dataclass(frozen=True)
class NoCredential:
    """No Authorization header: the in-cluster web view's base, which calls only as a person."""

    async def authorization(self) -> str | None:
        return None


@dataclass(frozen=True)
class StaticCredential:
    """A kubeconfig's `token` (`Bearer ...`) or `username`/`password` (`Basic ...`)."""

    header: str = field(repr=False)

    async def authorization(self) -> str | None:
        return self.header


class TokenFile:
    """A bearer token read from a file and read again once `period` seconds have passed since the last read.

    A failed re-read (the kubelet swapping the file, a momentary permission problem) keeps the token read
    before, as client-go does; the first read must succeed.
    """

    def __init__(self, path: Path, *, period: float = TOKEN_REREAD_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._period = period
        self._clock = clock
        self._token = self._read()
        self._read_at = clock()

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"

    def _read(self) -> str:
        try:
            token = self.path.read_text().strip()
        except OSError as error:
            raise ConnectionProblem(f"cannot read the token file {self.path}: {error.strerror or error}; "
                                    "check that the file exists and this user may read it") from None
        if not token:
            raise ConnectionProblem(f"the token file {self.path} is empty; write the bearer token into it")
        if not token.isprintable() or " " in token:
            raise ConnectionProblem(f"the token file {self.path} holds more than one token (spaces, line breaks or "
                                    "control characters); write the bearer token alone into it")
        return token

    async def authorization(self) -> str | None:
        if self._clock() - self._read_at >= self._period:
            try:
                self._token = self._read()
            except ConnectionProblem as problem:
                log.warning("%s (the token read before is used)", problem)
            self._read_at = self._clock()
        return f"Bearer {self._token}"


@dataclass(frozen=True)
class Connection:
    """Where the API server is (`server`, e.g. https://10.0.0.1:6443), how its certificate is checked and what
    this process presents to it."""

    server: str
    tls: ssl.SSLContext | None = field(default=None, repr=False)
    """None for a plain-http server (tests' loopback servers); otherwise verifying unless the kubeconfig said
    insecure-skip-tls-verify."""
    credential: Credential = field(default_factory=NoCredential)
    proxy: str | None = None
    """A kubeconfig cluster's `proxy-url`; without one the environment's proxy settings apply."""
    server_name: str | None = None
    """A kubeconfig cluster's `tls-server-name`: the name the server's certificate is checked against."""


def tls_context(
    *, ca_file: str | None = None, ca_data: bytes | None = None, insecure: bool = False,
    client_cert: bytes | str | None = None, client_key: bytes | str | None = None,
) -> ssl.SSLContext:
    """A client TLS context: trusting `ca_file`/`ca_data` (PEM) or the system's roots, presenting the client
    certificate and key (PEM bytes, or a file's path as str), verifying unless `insecure`."""
    try:
        if ca_data is not None:
            context = ssl.create_default_context(cadata=ca_data.decode("ascii", errors="replace"))
        else:
            context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError, ValueError) as error:
        where = ca_file or "certificate-authority-data"
        raise ConnectionProblem(f"cannot load the API server's CA certificate ({where}): {_reason(error)}; "
                                "it must be a PEM certificate") from None
    if client_cert is not None or client_key is not None:
        if client_cert is None or client_key is None:
            raise ConnectionProblem("a client certificate needs both the certificate and its key "
                                    "(client-certificate(-data) and client-key(-data))")
        _load_client_pair(context, client_cert, client_key)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_client_pair(context: ssl.SSLContext, cert: bytes | str, key: bytes | str) -> None:
    """Python's ssl loads a certificate chain from files only: PEM data goes through a private temporary
    directory that is gone before this returns."""
    with tempfile.TemporaryDirectory(prefix="towline-client-") as directory:
        paths = []
        for name, value in (("cert.pem", cert), ("key.pem", key)):
            if isinstance(value, str):
                paths.append(value)
                continue
            path = Path(directory) / name
            path.touch(mode=0o600)
            path.write_bytes(value)
            paths.append(str(path))
        try:
            context.load_cert_chain(paths[0], keyfile=paths[1])
        except (OSError, ssl.SSLError) as error:
            raise ConnectionProblem(f"cannot load the client certificate and key: {_reason(error)}; they must be "
                                    "a PEM certificate and its PEM private key") from None


def in_cluster(directory: Path = SERVICE_ACCOUNT_DIR, environ: dict[str, str] | None = None) -> Connection:
    """The pod's own service account: the `kubernetes` Service's address from the environment, the mounted CA
    and token (re-read as the kubelet rotates it)."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConnectionProblem("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; "
                                "pass --kubeconfig FILE or set KUBECONFIG")
    if ":" in host:
        host = f"[{host}]"
    ca_file = directory / "ca.crt"
    if not ca_file.is_file():
        raise ConnectionProblem(f"the service account's CA certificate {ca_file} is missing; mount the service "
                                "account (automountServiceAccountToken) or pass --kubeconfig FILE")
    return Connection(server=f"https://{host}:{port}", tls=tls_context(ca_file=str(ca_file)),
                      credential=TokenFile(directory / "token"))


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror and not isinstance(error, ssl.SSLError):
        return error.strerror
    return " ".join(str(error).split())

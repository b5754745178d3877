"""Loopback-only test servers and helpers for the connector tests.

Every server binds 127.0.0.1 with an ephemeral port; nothing here resolves a
real name or touches a non-loopback address.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpcore
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from towline_connectors.context import ActionContext, CredentialStore
from towline_connectors.netguard import NetGuard, NetworkRules
from towline_connectors.redact import Redactor
from towline_connectors.registry import get_action
from towline_connectors.runtime import Deadline
from towline_connectors.spec import ActionResult
from towline_connectors.transport import Connector, default_connector

# Loading the system CA store takes tens of milliseconds; one context serves every test.
_DEFAULT_CLIENT_SSL = ssl.create_default_context()

LOOPBACK_RULES = NetworkRules(allow_private=(ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")))


def static_resolver(mapping: Mapping[str, Sequence[str]]) -> Callable[[str, int], list[str]]:
    """A resolver that knows only `mapping` and records every lookup; never real DNS."""

    def resolve(host: str, port: int) -> list[str]:
        resolve.calls.append(host)  # type: ignore[attr-defined]
        if host in mapping:
            return list(mapping[host])
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    resolve.calls = []  # type: ignore[attr-defined]
    return resolve


def make_ctx(
    *,
    credentials: Mapping[str, Mapping[str, str]] | None = None,
    rules: NetworkRules = LOOPBACK_RULES,
    hosts: Mapping[str, Sequence[str]] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    connector: Connector | None = None,
    idempotency_key: str = "wf-run-step-1",
    deadline_seconds: float = 10.0,
    clock: Callable[[], float] = time.time,
) -> ActionContext:
    redactor = Redactor(v for keys in (credentials or {}).values() for v in keys.values())
    return ActionContext(
        credentials=CredentialStore(credentials or {}),
        redactor=redactor,
        guard=NetGuard(rules, static_resolver(hosts or {})),
        idempotency_key=idempotency_key,
        deadline=Deadline.after(deadline_seconds),
        ssl_context=ssl_context or _DEFAULT_CLIENT_SSL,
        connector=connector or guarded_test_connector(),
        clock=clock,
    )


def guarded_test_connector(inner: Connector | None = None) -> Connector:
    """A socket-layer connector that fails the test on any non-loopback address.

    Every test context uses it, so a broken guard shows up as an assertion,
    never as traffic leaving the machine.
    """

    async def connect(address: str, port: int, timeout: float | None) -> httpcore.AsyncNetworkStream:
        assert ipaddress.ip_address(address).is_loopback, f"test tried to connect to {address}"
        return await (inner or default_connector)(address, port, timeout)

    return connect


def redirecting_connector(target_port: int, seen: list[tuple[str, int]]) -> Connector:
    """Stands in for the internet: records the validated address, then connects to loopback."""

    async def connect(address: str, port: int, timeout: float | None) -> httpcore.AsyncNetworkStream:
        seen.append((address, port))
        return await default_connector("127.0.0.1", target_port, timeout)

    return connect


def run_action(name: str, inputs: Mapping[str, Any], ctx: ActionContext) -> ActionResult:
    spec = get_action(name)
    assert spec is not None
    model = spec.input_model.model_validate(dict(inputs))

    async def go() -> ActionResult:
        return await spec.run(model, ctx)

    return asyncio.run(go())


def output_of(result: ActionResult) -> Any:
    output = result.output
    return output.model_dump(mode="json", by_alias=True) if hasattr(output, "model_dump") else output


# --- HTTP -----------------------------------------------------------------


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False  # close the connection without answering

    def encoded(self) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        if isinstance(self.body, bytes):
            return self.body, headers
        if isinstance(self.body, str):
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
            return self.body.encode(), headers
        headers.setdefault("Content-Type", "application/json")
        return json.dumps(self.body).encode(), headers


Route = Reply | Callable[[RecordedRequest], Reply]


class _HTTPHandler(BaseHTTPRequestHandler):
    server: _OwnedHTTPServer
    protocol_version = "HTTP/1.1"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        request = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length) if length else b"",
        )
        owner = self.server.owner
        owner.requests.append(request)
        route = owner.routes.get(self.path.split("?", 1)[0], Reply(404, "no route"))
        reply = route(request) if callable(route) else route
        if reply.delay:
            time.sleep(reply.delay)
        if reply.drop:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        body, headers = reply.encoded()
        self.send_response(reply.status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _OwnedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackHTTPServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out on purpose leave broken pipes behind


class LoopbackHTTPServer:
    """A programmable HTTP(S) server on 127.0.0.1 that records what it receives."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[RecordedRequest] = []
        self._server = _OwnedHTTPServer(("127.0.0.1", 0), _HTTPHandler)
        self._server.owner = self
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self.scheme = "https" if tls else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- TLS ------------------------------------------------------------------


@dataclass(frozen=True)
class TLSMaterial:
    ca_pem: str
    cert_file: Path
    key_file: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem)

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def make_tls_material(directory: Path, names: Sequence[str]) -> TLSMaterial:
    """A throwaway CA and a leaf certificate for `names`, written to `directory`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "towline test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_file = directory / "server.pem"
    key_file = directory / "server.key"
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return TLSMaterial(ca_cert.public_bytes(serialization.Encoding.PEM).decode(), cert_file, key_file)


def write_secret(directory: Path, alias: str, values: dict[str, str]) -> None:
    """Lay out a Secret the way the kubelet does: real files in a timestamped dir, linked via ..data."""
    alias_dir = directory / alias
    data_dir = alias_dir / "..2026_01_01_00_00_00.000000001"
    data_dir.mkdir(parents=True)
    for key, value in values.items():
        (data_dir / key).write_text(value)
    (alias_dir / "..data").symlink_to(data_dir.name)
    for key in values:
        (alias_dir / key).symlink_to(f"..data/{key}")

"""Fixtures for the connector tests: loopback servers and throwaway TLS material.

Nothing here may reach anything but 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from connector_testkit import LoopbackHTTPServer, TLSMaterial, make_tls_material
from smtp_testkit import LoopbackSMTPServer


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSMaterial:
    """A CA plus a certificate for the public-looking names tests map to loopback."""
    return make_tls_material(tmp_path_factory.mktemp("tls"), ["api.example.test", "smtp.example.test"])


@pytest.fixture
def http_server() -> Iterator[LoopbackHTTPServer]:
    server = LoopbackHTTPServer()
    yield server
    server.close()


@pytest.fixture
def https_server(tls: TLSMaterial) -> Iterator[LoopbackHTTPServer]:
    server = LoopbackHTTPServer(tls=tls.server_context())
    yield server
    server.close()


@pytest.fixture
def smtp_server() -> Iterator[LoopbackSMTPServer]:
    server = LoopbackSMTPServer()
    yield server
    server.close()


@pytest.fixture
def credentials_dir(tmp_path: Path) -> Path:
    """An empty credentials directory in the Kubernetes Secret volume layout."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    return directory

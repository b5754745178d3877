"""Tokens, kubeconfigs and certificates of the local control plane."""

from __future__ import annotations

import base64
import csv
import io
import ipaddress
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from towline_dev.certs import FRONT_PROXY_CLIENT, generate_certs
from towline_dev.kubeconfig import (
    ALL_USERS,
    PEOPLE,
    build_kubeconfig,
    new_tokens,
    token_file_text,
    write_kubeconfig,
)


def test_token_file_lists_every_user_with_its_groups() -> None:
    tokens = new_tokens()
    rows = {row[1]: row for row in csv.reader(io.StringIO(token_file_text(tokens)))}
    assert set(rows) == {user.name for user in ALL_USERS}
    assert rows["bob"] == [tokens["bob"], "bob", "uid-bob", "team-b,approvers"]
    assert rows["admin"][3] == "system:masters"


def test_tokens_are_fresh_per_start() -> None:
    assert new_tokens()["alice"] != new_tokens()["alice"]


def test_kubeconfig_has_one_context_per_person_and_admin_is_current(tmp_path: Path) -> None:
    tokens = new_tokens()
    names = tuple(user.name for user in PEOPLE)
    document = build_kubeconfig(server="https://127.0.0.1:6443", ca_pem=b"PEM", tokens=tokens, users=names,
                                current="admin")
    path = write_kubeconfig(tmp_path / "kubeconfig", document)

    loaded = yaml.safe_load(path.read_text())
    assert loaded["current-context"] == "admin"
    assert {c["name"]: c["context"]["user"] for c in loaded["contexts"]} == {n: n for n in names}
    assert {u["name"]: u["user"]["token"] for u in loaded["users"]} == {n: tokens[n] for n in names}
    assert base64.b64decode(loaded["clusters"][0]["cluster"]["certificate-authority-data"]) == b"PEM"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_serving_cert_is_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    certs = generate_certs(tmp_path)
    ca = x509.load_pem_x509_certificate(certs.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(certs.serving_cert.read_bytes())

    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert stat.S_IMODE(certs.ca_key.stat().st_mode) == 0o600


def test_service_account_key_pair_matches(tmp_path: Path) -> None:
    certs = generate_certs(tmp_path)
    private = serialization.load_pem_private_key(certs.service_account_key.read_bytes(), password=None)
    public = serialization.load_pem_public_key(certs.service_account_public_key.read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key().public_numbers() == public.public_numbers()  # type: ignore[union-attr]


def test_front_proxy_client_cert_comes_from_a_ca_of_its_own(tmp_path: Path) -> None:
    # Aggregated APIs believe X-Remote-User only from this CA's client: a cluster CA would let any person's
    # client certificate claim to be anyone there.
    certs = generate_certs(tmp_path)
    front_proxy_ca = x509.load_pem_x509_certificate(certs.front_proxy_ca_cert.read_bytes())
    client = x509.load_pem_x509_certificate(certs.front_proxy_client_cert.read_bytes())

    client.verify_directly_issued_by(front_proxy_ca)
    with pytest.raises(ValueError):
        client.verify_directly_issued_by(x509.load_pem_x509_certificate(certs.ca_cert.read_bytes()))
    assert client.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == FRONT_PROXY_CLIENT
    assert stat.S_IMODE(certs.front_proxy_client_key.stat().st_mode) == 0o600

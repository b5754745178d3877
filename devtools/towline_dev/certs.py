"""Key material for one local control plane: a CA, the API server's serving cert, the SA key, and a front-proxy
CA with the client certificate the API server proxies to aggregated APIs with.

Everything is generated fresh for each start and written only into the control
plane's state directory, so no two starts (or two concurrent test sessions) ever
share a credential. ECDSA P-256 keys keep generation in the milliseconds.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=30)
FRONT_PROXY_CLIENT = "front-proxy-client"
"""The common name of the API server's front-proxy client certificate (--requestheader-allowed-names)."""


@dataclass(frozen=True)
class ControlPlaneCerts:
    """Paths of the PEM files the components are started with."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_public_key: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path
    front_proxy_ca_cert: Path
    """A CA of its own (as kubeadm makes one): aggregated APIs believe the user headers only from a client
    certificate of this CA, so no certificate of the cluster CA (a person's, a node's) can claim a user."""
    front_proxy_client_cert: Path
    front_proxy_client_key: Path


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    path.write_bytes(data)
    path.chmod(mode)


def _ca(
    now: datetime.datetime, common_name: str = "towline-dev-ca"
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_leaf(
    now: datetime.datetime,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    *,
    common_name: str,
    organizations: tuple[str, ...] = (),
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate signed by the CA: a client one, or a serving one when names/IPs are given."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    serving = bool(server_names or server_ips)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if serving else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if serving:
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _serving(
    now: datetime.datetime,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    extra_ips: tuple[str, ...],
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    # The in-cluster names are there so a client that follows the `kubernetes`
    # Service's DNS name still verifies (pods on the local node do).
    return issue_leaf(
        now, ca_key, ca_cert, common_name="kube-apiserver",
        server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                      "kubernetes.default.svc.cluster.local"),
        server_ips=("127.0.0.1", *extra_ips),
    )


def write_key_pair(
    cert_path: Path, key_path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> None:
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(key_path, _private_pem(key), 0o600)


def load_ca(directory: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The CA `generate_certs` wrote, to sign more certificates with (the node's)."""
    key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{directory / 'ca.key'} is not an EC key")
    return key, x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())


def generate_certs(
    directory: Path, *, now: datetime.datetime | None = None, extra_ips: tuple[str, ...] = ()
) -> ControlPlaneCerts:
    """Write a fresh CA, serving cert/key, kubelet client cert/key, service-account key pair, and the front-proxy
    CA with its client cert/key.

    `extra_ips` are further addresses the API server's certificate is valid for
    (the address it serves a node on, the `kubernetes` Service's IP).
    """
    directory.mkdir(parents=True, exist_ok=True)
    moment = now or datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = _ca(moment)
    serving_key, serving_cert = _serving(moment, ca_key, ca_cert, extra_ips)
    # How the API server proves itself to a kubelet (logs, exec); the kubelet asks RBAC.
    kubelet_client_key, kubelet_client_cert = issue_leaf(
        moment, ca_key, ca_cert, common_name="kube-apiserver-kubelet-client", organizations=("system:masters",)
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    paths = ControlPlaneCerts(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
        service_account_public_key=directory / "sa.pub",
        kubelet_client_cert=directory / "apiserver-kubelet-client.crt",
        kubelet_client_key=directory / "apiserver-kubelet-client.key",
        front_proxy_ca_cert=directory / "front-proxy-ca.crt",
        front_proxy_client_cert=directory / "front-proxy-client.crt",
        front_proxy_client_key=directory / "front-proxy-client.key",
    )
    front_proxy_ca_key, front_proxy_ca = _ca(moment, "towline-dev-front-proxy-ca")
    proxy_key, proxy_cert = issue_leaf(moment, front_proxy_ca_key, front_proxy_ca, common_name=FRONT_PROXY_CLIENT)
    _write(paths.front_proxy_ca_cert, front_proxy_ca.public_bytes(serialization.Encoding.PEM), 0o644)
    write_key_pair(paths.front_proxy_client_cert, paths.front_proxy_client_key, proxy_key, proxy_cert)
    write_key_pair(paths.kubelet_client_cert, paths.kubelet_client_key, kubelet_client_key, kubelet_client_cert)
    _write(paths.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(paths.ca_key, _private_pem(ca_key), 0o600)
    _write(paths.serving_cert, serving_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(paths.serving_key, _private_pem(serving_key), 0o600)
    _write(paths.service_account_key, _private_pem(sa_key), 0o600)
    _write(
        paths.service_account_public_key,
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        0o644,
    )
    return paths

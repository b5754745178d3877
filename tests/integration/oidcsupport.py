"""What the tests of the identity provider share: kubectl with a person's ID token, the people's roles under their
OIDC names, and tokens the API server must refuse (signed by a key of the test's own).

Every request here goes to the real API server; the tokens come from the real provider (towline_dev.idp) through
its login form, except the forgeries, which are what an attacker without the provider's key can make.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
import urllib.request
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from tests.integration.support import bind_role

from towline_dev.controlplane import ControlPlane
from towline_dev.idp.issuer import person
from towline_dev.idp.provider import IdentityProvider

ALICE, BOB, CAROL, DAVE = (person(name).username for name in ("alice", "bob", "carol", "dave"))
"""The people's user names at the API server when they come with an ID token: `oidc:alice`, ..."""


def grant_oidc_people(cluster: ControlPlane, namespace: str) -> None:
    """The people's roles in `namespace` under their OIDC names: bob approves, carol starts runs (and may try to
    approve: the four-eyes rule, not RBAC, must stop her on her own runs), alice edits and starts runs, dave
    has nothing."""
    bind_role(cluster, namespace, "towline-runner", users=(CAROL, ALICE))
    bind_role(cluster, namespace, "towline-approver", users=(BOB, CAROL))
    bind_role(cluster, namespace, "edit", users=(ALICE,))


def kubectl_with_token(
    cluster: ControlPlane, token: str, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The pinned kubectl with nothing but this bearer token (no kubeconfig user), not raising."""
    argv = [str(cluster.binaries.path("kubectl")), "--kubeconfig=/dev/null", f"--server={cluster.server}",
            f"--certificate-authority={cluster.ca_cert}", f"--token={token}", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=60)


def whoami(cluster: ControlPlane, token: str) -> dict[str, Any] | None:
    """Who the API server takes the bearer of `token` for (a SelfSubjectReview's userInfo), or None when it
    refuses the token (401, "must be logged in")."""
    answer = kubectl_with_token(cluster, token, "auth", "whoami", "-o", "json")
    if answer.returncode != 0:
        assert "Unauthorized" in answer.stderr or "must be logged in" in answer.stderr, answer.stderr
        return None
    user: dict[str, Any] = json.loads(answer.stdout)["status"]["userInfo"]
    return user


def token_claims(token: str) -> dict[str, Any]:
    header, payload = (_b64decode(part) for part in token.split(".")[:2])
    del header
    claims: dict[str, Any] = json.loads(payload)
    return claims


def token_header(token: str) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(_b64decode(token.split(".", maxsplit=1)[0]))
    return header


def forged_token(claims: dict[str, Any], header: dict[str, Any]) -> str:
    """A JWT with these claims and header (its `alg` RS256), signed by a fresh RSA key nobody trusts."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signing_input = f"{_b64encode(json.dumps({**header, 'alg': 'RS256'}).encode())}." \
                    f"{_b64encode(json.dumps(claims).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64encode(signature)}"


def fresh_claims(claims: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """`claims` issued now and valid for an hour, with `changes`."""
    now = int(time.time())
    return {**claims, "iat": now, "auth_time": now, "exp": now + 3600, **changes}


def issuer_keys(provider: IdentityProvider) -> list[str]:
    """The key ids the issuer publishes (its JWKS)."""
    context = ssl.create_default_context(cafile=str(provider.ca_bundle))
    with urllib.request.urlopen(f"{provider.issuer}/.well-known/jwks.json", context=context,
                                timeout=10) as response:
        return [str(key["kid"]) for key in json.loads(response.read())["keys"]]


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

"""The ID token's checks and the provider's discovery document (towline.plugin.ui.oidc), with real signatures."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from towline.plugin.ui.oidc import (
    ProviderSettings,
    SignInError,
    authorization_url,
    code_challenge,
    endpoints_from,
    verify_id_token,
)

ISSUER = "https://id.example.test"
SETTINGS = ProviderSettings(issuer=ISSUER, client_id="towline-ui", client_secret="s3cret",
                            redirect_uri="https://towline.example.test/auth/callback")
NOW = 1_900_000_000
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _keys() -> jwt.PyJWKSet:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
    return jwt.PyJWKSet.from_dict({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})


def _token(key: Any = KEY, algorithm: str = "RS256", kid: str = "k1", **changes: Any) -> str:
    claims = {"iss": ISSUER, "aud": "towline-ui", "sub": "bob", "exp": NOW + 300, "iat": NOW, "nonce": "n-1",
              **changes}
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm=algorithm,
                      headers={"kid": kid})


def _verify(token: str, nonce: str = "n-1", now: float = NOW) -> dict[str, Any]:
    return verify_id_token(token, _keys(), SETTINGS, nonce=nonce, now=now)


def test_a_token_of_the_provider_for_this_client_and_this_sign_in_passes() -> None:
    assert _verify(_token())["sub"] == "bob"


@pytest.mark.parametrize(("changes", "why"), [
    ({"iss": "https://other.example.test"}, "issuer"),
    ({"aud": "another-client"}, "Audience"),
    ({"aud": ["towline-ui", "another-client"]}, "azp"),
    ({"exp": NOW - 61}, "expired"),
    ({"iat": NOW + 120}, "not yet valid"),
    ({"nonce": "n-2"}, "nonce"),
    ({"nonce": None}, "nonce"),
    ({"exp": None}, "exp"),
    ({"sub": None}, "sub"),
])
def test_a_token_failing_one_check_is_refused_naming_it(changes: dict[str, Any], why: str) -> None:
    with pytest.raises(SignInError, match=why):
        _verify(_token(**changes))


def test_several_audiences_pass_when_azp_is_this_client() -> None:
    assert _verify(_token(aud=["towline-ui", "other"], azp="towline-ui"))["azp"] == "towline-ui"


def test_a_token_signed_by_another_key_is_refused() -> None:
    with pytest.raises(SignInError, match="Signature verification failed"):
        _verify(_token(key=OTHER_KEY))


def test_an_unsigned_token_is_refused() -> None:
    unsigned = jwt.encode({"iss": ISSUER, "aud": "towline-ui", "sub": "bob", "exp": NOW + 300, "iat": NOW,
                           "nonce": "n-1"}, None, algorithm="none")
    with pytest.raises(SignInError, match="'none'"):
        _verify(unsigned)


def test_an_hmac_token_keyed_with_the_public_key_is_refused() -> None:
    # The classic confusion: HS256 with the provider's public key (which anyone can read) as the secret.
    public_pem = KEY.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    header = _b64({"alg": "HS256", "typ": "JWT", "kid": "k1"})
    body = _b64({"iss": ISSUER, "aud": "towline-ui", "sub": "mallory", "exp": NOW + 300, "iat": NOW, "nonce": "n-1"})
    signature = base64.urlsafe_b64encode(hmac.new(public_pem, f"{header}.{body}".encode(), hashlib.sha256).digest())
    forged = f"{header}.{body}.{signature.rstrip(b'=').decode()}"
    with pytest.raises(SignInError, match="'HS256'"):
        _verify(forged)


def _b64(document: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=").decode()


def test_a_token_naming_an_unknown_key_asks_for_the_keys_again() -> None:
    with pytest.raises(KeyError):
        _verify(_token(kid="k2"))


def test_discovery_must_name_the_configured_issuer_exactly() -> None:
    document = {"issuer": ISSUER + "/", "authorization_endpoint": f"{ISSUER}/auth",
                "token_endpoint": f"{ISSUER}/token", "jwks_uri": f"{ISSUER}/jwks"}
    with pytest.raises(SignInError, match=r"set ui\.oidc\.issuer to exactly"):
        endpoints_from(document, ISSUER)
    assert endpoints_from({**document, "issuer": ISSUER}, ISSUER).token == f"{ISSUER}/token"


def test_discovery_without_pkce_s256_is_refused() -> None:
    document = {"issuer": ISSUER, "authorization_endpoint": "a", "token_endpoint": "t", "jwks_uri": "j",
                "code_challenge_methods_supported": ["plain"]}
    with pytest.raises(SignInError, match="S256"):
        endpoints_from(document, ISSUER)


def test_the_authorization_request_carries_pkce_s256_state_and_nonce() -> None:
    endpoints = endpoints_from({"issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/oauth2/auth",
                                "token_endpoint": "t", "jwks_uri": "j"}, ISSUER)
    url = authorization_url(endpoints, SETTINGS, state="st", nonce="nn", verifier="v" * 64)
    assert url.startswith(f"{ISSUER}/oauth2/auth?response_type=code&client_id=towline-ui")
    assert "state=st" in url and "nonce=nn" in url and "code_challenge_method=S256" in url
    assert f"code_challenge={code_challenge('v' * 64)}" in url and "v" * 64 not in url, "the verifier stays here"
    # RFC 7636 appendix B's example.
    verifier, challenge = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    assert code_challenge(verifier) == challenge

"""OpenID Connect for the in-cluster web view: discovery, the authorization code flow with PKCE, the ID token's checks.

Any conforming provider: its discovery document names the endpoints and its JWKS the signing keys. pyjwt checks
the signature and the registered claims; aiohttp's client (the web view's own server library) makes the three
calls to the provider: discovery, JWKS, token.

An ID token counts only when all of these hold: it is signed by a key the provider publishes, with an asymmetric
algorithm (never `none`, never an HMAC keyed by something a client knows); `iss` is the configured issuer exactly;
`aud` holds the client id (and `azp`, when there are several audiences, is the client id); `exp` is in the future
and `iat` present; `nonce` is the one this sign-in sent. The API server checks the token again on every call (its
own issuer, audience and claim rules): this module only decides whether a browser may hold a session.

Never logs a token, a code, a verifier or the client secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import jwt

from towline.jsontypes import JSON

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""Asymmetric algorithms only: an ID token signed with `none` or HS256 is refused whatever its header says."""
LEEWAY_SECONDS = 60
"""Clock skew allowed between the provider and this server for `exp`, `iat` and `nbf`."""
KEYS_REFRESH_SECONDS = 60.0
"""An unknown key id fetches the JWKS again (the provider rotated its keys), at most this often."""
TIMEOUT = aiohttp.ClientTimeout(total=10.0)


class SignInError(Exception):
    """The sign-in could not finish; the message says why, for the person and the log (never a secret)."""


@dataclass(frozen=True)
class ProviderSettings:
    """What the chart's `ui.oidc` values configure."""

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    redirect_uri: str
    scopes: tuple[str, ...] = ("openid", "email", "profile", "groups")


@dataclass(frozen=True)
class Endpoints:
    """The provider's discovery document, as far as a sign-in needs it."""

    authorization: str
    token: str
    jwks: str
    end_session: str | None


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def endpoints_from(document: Any, issuer: str) -> Endpoints:
    """Read a discovery document; its `issuer` must be the configured one exactly (OpenID Connect Discovery 4.3)."""
    if not isinstance(document, dict):
        raise SignInError(f"{discovery_url(issuer)} is not a JSON object: is ui.oidc.issuer the provider's issuer?")
    if document.get("issuer") != issuer:
        raise SignInError(f"the provider's discovery document names issuer {document.get('issuer')!r}, not "
                          f"{issuer!r}: set ui.oidc.issuer to exactly the provider's issuer")
    missing = [key for key in ("authorization_endpoint", "token_endpoint", "jwks_uri")
               if not isinstance(document.get(key), str)]
    if missing:
        raise SignInError(f"the provider's discovery document lacks {', '.join(missing)}")
    methods = document.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise SignInError("the provider does not support PKCE with S256 (code_challenge_methods_supported)")
    end_session = document.get("end_session_endpoint")
    return Endpoints(authorization=document["authorization_endpoint"], token=document["token_endpoint"],
                     jwks=document["jwks_uri"], end_session=end_session if isinstance(end_session, str) else None)


def code_challenge(verifier: str) -> str:
    """PKCE S256 (RFC 7636 4.2): BASE64URL(SHA256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def authorization_url(endpoints: Endpoints, settings: ProviderSettings, *, state: str, nonce: str,
                      verifier: str) -> str:
    query = {
        "response_type": "code", "client_id": settings.client_id, "redirect_uri": settings.redirect_uri,
        "scope": " ".join(settings.scopes), "state": state, "nonce": nonce,
        "code_challenge": code_challenge(verifier), "code_challenge_method": "S256",
    }
    separator = "&" if "?" in endpoints.authorization else "?"
    return endpoints.authorization + separator + urlencode(query)


def verify_id_token(token: str, keys: jwt.PyJWKSet, settings: ProviderSettings, *, nonce: str,
                    now: float | None = None) -> JSON:
    """The token's claims if it passes every check in the module's docstring; SignInError naming the one that
    failed otherwise."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as error:
        raise SignInError(f"the ID token is not a JWT: {error}") from error
    algorithm = header.get("alg")
    if algorithm not in ALGORITHMS:
        raise SignInError(f"the ID token is signed with {algorithm!r}; only {', '.join(ALGORITHMS)} are accepted")
    key = _key_for(keys, header.get("kid"))
    try:
        claims = _decode_at(token, key, algorithm, settings, time.time() if now is None else now)
    except jwt.PyJWTError as error:
        raise SignInError(f"the ID token was refused: {error}") from error
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != settings.client_id:
        raise SignInError("the ID token has several audiences and its azp is not this client")
    if not isinstance(claims.get("nonce"), str) or claims["nonce"] != nonce:
        raise SignInError("the ID token's nonce is not this sign-in's: start again from the sign-in page")
    return claims


def _decode_at(token: str, key: Any, algorithm: str, settings: ProviderSettings, now: float) -> JSON:
    """Decode with the signature and audience checked, and the time claims checked against `now`."""
    claims: JSON = jwt.decode(token, key=key, algorithms=[algorithm], audience=settings.client_id,
                              issuer=settings.issuer,
                              options={"require": ["iss", "aud", "exp", "iat", "sub"], "verify_exp": False,
                                       "verify_iat": False, "verify_nbf": False})
    for name in ("exp", "iat"):
        if not isinstance(claims.get(name), int | float):
            raise jwt.InvalidTokenError(f"claim {name} is not a number")
    if claims["exp"] <= now - LEEWAY_SECONDS:
        raise jwt.ExpiredSignatureError("Signature has expired")
    if claims["iat"] > now + LEEWAY_SECONDS:
        raise jwt.ImmatureSignatureError("The token is not yet valid (iat)")
    if isinstance(claims.get("nbf"), int | float) and claims["nbf"] > now + LEEWAY_SECONDS:
        raise jwt.ImmatureSignatureError("The token is not yet valid (nbf)")
    return claims


def _key_for(keys: jwt.PyJWKSet, kid: Any) -> Any:
    candidates = [key for key in keys.keys if kid is None or key.key_id == kid]
    if len(candidates) != 1:
        raise KeyError(kid)
    return candidates[0]


class Provider:
    """One provider: discovered once, its keys fetched again when a token names a key id they lack."""

    def __init__(self, settings: ProviderSettings, http: aiohttp.ClientSession) -> None:
        self.settings = settings
        self._http = http
        self._endpoints: Endpoints | None = None
        self._keys: jwt.PyJWKSet | None = None
        self._keys_fetched = 0.0

    async def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            self._endpoints = endpoints_from(await self._get_json(discovery_url(self.settings.issuer)),
                                             self.settings.issuer)
        return self._endpoints

    async def _get_json(self, url: str) -> Any:
        try:
            async with self._http.get(url, timeout=TIMEOUT) as response:
                status, raw = response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise SignInError(f"cannot reach the identity provider at {url}: {type(error).__name__}") from error
        if status != 200:
            raise SignInError(f"the identity provider answered {status} at {url}")
        try:
            return json.loads(raw)
        except ValueError as error:
            raise SignInError(f"the identity provider's answer at {url} is not JSON") from error

    async def _fetch_keys(self) -> jwt.PyJWKSet:
        document = await self._get_json((await self.endpoints()).jwks)
        try:
            self._keys = jwt.PyJWKSet.from_dict(document)
        except jwt.PyJWTError as error:
            raise SignInError(f"the identity provider's JWKS holds no usable key: {error}") from error
        self._keys_fetched = time.monotonic()
        return self._keys

    async def authorization_url(self, *, state: str, nonce: str, verifier: str) -> str:
        return authorization_url(await self.endpoints(), self.settings, state=state, nonce=nonce, verifier=verifier)

    async def sign_in(self, code: str, verifier: str, nonce: str) -> tuple[str, JSON]:
        """Trade the code (with the PKCE verifier and the client secret) for an ID token; check it."""
        endpoints = await self.endpoints()
        # client_secret_basic (RFC 6749 2.3.1): the id and secret form-encoded, then as HTTP Basic credentials.
        auth = aiohttp.BasicAuth(quote(self.settings.client_id, safe=""), quote(self.settings.client_secret, safe=""))
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": self.settings.redirect_uri,
                "code_verifier": verifier}
        try:
            async with self._http.post(endpoints.token, timeout=TIMEOUT, auth=auth, data=form) as response:
                status, raw = response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise SignInError(f"cannot reach the identity provider's token endpoint: {type(error).__name__}") from error
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = {}
        if status != 200 or not isinstance(answer, dict):
            said = answer.get("error", "") if isinstance(answer, dict) else ""
            raise SignInError(f"the identity provider refused the code ({status} {said})")
        token = answer.get("id_token")
        if not isinstance(token, str):
            raise SignInError("the identity provider's token answer has no id_token: is `openid` in ui.oidc.scopes?")
        keys = self._keys or await self._fetch_keys()
        try:
            return token, verify_id_token(token, keys, self.settings, nonce=nonce)
        except KeyError:
            if time.monotonic() - self._keys_fetched < KEYS_REFRESH_SECONDS:
                raise SignInError("the ID token names a signing key the provider does not publish") from None
        try:
            return token, verify_id_token(token, await self._fetch_keys(), self.settings, nonce=nonce)
        except KeyError:
            raise SignInError("the ID token names a signing key the provider does not publish") from None

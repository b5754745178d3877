"""A person's sign-in as an app's server and its user's browser make it: the authorization-code flow with PKCE.

Plain HTTPS requests, no back door: the authorization request at the issuer, the login app's form read and
submitted as a browser submits it (its action and hidden fields), every redirect followed with the cookies it set,
until the provider sends the browser to the client's redirect URI with a code; then the code (and the PKCE
verifier) traded for tokens at the token endpoint with the client's credentials.
"""

from __future__ import annotations

import base64
import hashlib
import http.cookiejar
import json
import secrets
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from towline_dev.idp.provider import IdentityProvider, OAuthClient


class SignInRefused(RuntimeError):  # noqa: N818 - reads as what happened
    """The provider or the login app gave no code; `status` and `page` are what the browser was shown last."""

    def __init__(self, message: str, status: int, page: str) -> None:
        super().__init__(message)
        self.status = status
        self.page = page


@dataclass(frozen=True)
class Tokens:
    id_token: str
    access_token: str
    refresh_token: str | None

    def claims(self) -> dict[str, Any]:
        """The ID token's payload, decoded and not verified (the API server verifies it)."""
        payload = self.id_token.split(".")[1]
        decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return decoded


class _Form(HTMLParser):
    """The first form of a page: its action and its inputs' names and values."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self._in_form = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {key: value or "" for key, value in attrs}
        if tag == "form" and self.action is None:
            self.action, self._in_form = attributes.get("action", ""), True
        elif tag == "input" and self._in_form and attributes.get("name"):
            self.fields[attributes["name"]] = attributes.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_form = False


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def pkce_pair() -> tuple[str, str]:
    """A PKCE code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


@dataclass(frozen=True)
class Authorization:
    """One authorization request: where to send the browser, and what the callback must match."""

    url: str
    state: str
    verifier: str
    redirect_uri: str


def authorization_request(
    provider: IdentityProvider, client: OAuthClient, *, scope: str = "openid profile groups",
    redirect_uri: str | None = None,
) -> Authorization:
    """The authorization request (code flow, PKCE S256, a fresh state and nonce) for `client` at `provider`."""
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(16)
    redirect = redirect_uri or client.redirect_uris[0]
    url = f"{provider.issuer}/oauth2/auth?" + urllib.parse.urlencode({
        "response_type": "code", "client_id": client.client_id, "redirect_uri": redirect, "scope": scope,
        "state": state, "nonce": secrets.token_urlsafe(16), "code_challenge": challenge,
        "code_challenge_method": "S256",
    })
    return Authorization(url, state, verifier, redirect)


def sign_in(
    provider: IdentityProvider, client: OAuthClient, name: str, password: str | None = None, *,
    scope: str = "openid profile groups", max_hops: int = 12,
) -> Tokens:
    """`name`'s tokens for `client`, through the provider's login form with `password` (theirs by default).

    Raises SignInRefused when no code comes back (a wrong password: the form again, with 401)."""
    context = ssl.create_default_context(cafile=str(provider.ca_bundle))
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
        _NoRedirects(),
    )
    authorization = authorization_request(provider, client, scope=scope)
    url, data = authorization.url, None
    for _ in range(max_hops):
        status, headers, page = _open(opener, url, data)
        data = None
        if status in {301, 302, 303, 307}:
            url = urllib.parse.urljoin(url, headers["Location"])
            if url.startswith(authorization.redirect_uri):
                return redeem(provider, client, authorization, url)
            continue
        form = _Form()
        form.feed(page)
        if status != 200 or form.action is None or "password" not in form.fields:
            raise SignInRefused(f"signing {name} in stopped at {url} ({status}): {page[:300]}", status, page)
        secret = provider.password(name) if password is None else password
        fields = {**form.fields, "username": name, "password": secret}
        url, data = urllib.parse.urljoin(url, form.action), urllib.parse.urlencode(fields).encode()
        # The answer to the form: a redirect onwards, or the form again (401) when the password was wrong.
        status, headers, page = _open(opener, url, data)
        data = None
        if status not in {301, 302, 303}:
            raise SignInRefused(f"the login app refused {name} ({status})", status, page)
        url = urllib.parse.urljoin(url, headers["Location"])
    raise SignInRefused(f"signing {name} in took more than {max_hops} redirects (last: {url})", 0, "")


def _open(opener: urllib.request.OpenerDirector, url: str, data: bytes | None) -> tuple[int, Any, str]:
    try:
        with opener.open(url, data=data, timeout=30) as response:
            return response.status, response.headers, response.read().decode(errors="replace")
    except urllib.error.HTTPError as answer:
        return answer.code, answer.headers, answer.read().decode(errors="replace")


def redeem(provider: IdentityProvider, client: OAuthClient, authorization: Authorization, callback: str) -> Tokens:
    """The tokens for the code the provider sent the browser back to `callback` with (the client's part)."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(callback).query)
    if query.get("state") != [authorization.state] or "code" not in query:
        raise SignInRefused(f"the provider came back without a code for this sign-in: {callback}", 0, "")
    body = urllib.parse.urlencode({
        "grant_type": "authorization_code", "code": query["code"][0], "redirect_uri": authorization.redirect_uri,
        "code_verifier": authorization.verifier,
    }).encode()
    basic = base64.b64encode(
        f"{urllib.parse.quote(client.client_id)}:{urllib.parse.quote(client.client_secret)}".encode()
    ).decode()
    # The issuer's URL is https, never a name a caller chooses.
    request = urllib.request.Request(f"{provider.issuer}/oauth2/token", data=body, headers={  # noqa: S310
        "Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded",
    })
    try:
        trusted = ssl.create_default_context(cafile=str(provider.ca_bundle))
        with urllib.request.urlopen(request, context=trusted, timeout=30) as response:  # noqa: S310
            answer = json.loads(response.read())
    except urllib.error.HTTPError as refused:
        raise SignInRefused(f"the token endpoint refused the code ({refused.code})", refused.code,
                            refused.read().decode(errors="replace")) from None
    return Tokens(answer["id_token"], answer["access_token"], answer.get("refresh_token"))

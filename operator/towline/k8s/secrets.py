"""Signing keys of webhook triggers: the only Secret reads in Towline, and only by the ingress.

The ingress's ServiceAccount may read a Secret only where the namespace's
owner granted it by name (a Role with `resourceNames`, see docs/ingress.md);
the operator has no such permission and never imports this module (an import
contract says so). Values are kept in memory for `ttl` seconds and never logged:
the value of the key a trigger uses is registered with the log redactor
(`remember_secret`) before anything else sees it, so no line, however it came
by the value (an error that quotes a header the sender filled with the key, a
traceback), can carry it. Only that key is registered, and only if it is at
least `MIN_SECRET_BYTES` long: the redactor is process-wide, so a tenant's
short value (`a`, `team-b`) or an unrelated key of the same Secret would blank
that text in every tenant's log lines. A shorter signing secret is refused
(`SecretProblem`), never used. A failed verification never triggers a re-read
(no amplification).
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass

from towline.k8s.client import ApiError, KubeApi, Resource
from towline.logs import remember_secret

SECRETS = Resource("", "v1", "secrets")
MIN_SECRET_BYTES = 16
"""The shortest signing secret (or bearer token) the ingress uses, and the shortest form it redacts."""


@dataclass(frozen=True)
class SecretProblem:
    """Why a key could not be read; safe to log (names only)."""

    message: str


@dataclass
class _Entry:
    data: dict[str, str] | SecretProblem
    fetched: float


class SecretKeyReader:
    """Reads `key` of Secret `name`, cached per Secret for `ttl` seconds (rotation takes at most that long)."""

    def __init__(self, api: KubeApi, ttl: float = 60.0, problem_ttl: float = 5.0) -> None:
        self._api = api
        self._ttl = ttl
        self._problem_ttl = problem_ttl
        self._cache: dict[tuple[str, str], _Entry] = {}

    async def read(self, namespace: str, name: str, key: str, *, now: float) -> bytes | SecretProblem:
        entry = self._cache.get((namespace, name))
        fresh = entry is not None and now - entry.fetched < (
            self._problem_ttl if isinstance(entry.data, SecretProblem) else self._ttl)
        if entry is None or not fresh:
            entry = _Entry(await self._fetch(namespace, name), now)
            self._cache[(namespace, name)] = entry
        if isinstance(entry.data, SecretProblem):
            return entry.data
        if key not in entry.data:
            return SecretProblem(f"Secret {namespace}/{name} has no key {key!r}")
        value = base64.b64decode(entry.data[key])
        if len(value.strip()) < MIN_SECRET_BYTES:
            return SecretProblem(f"Secret {namespace}/{name} key {key!r} holds fewer than {MIN_SECRET_BYTES} bytes; "
                                 f"a signing secret must be at least {MIN_SECRET_BYTES} bytes (32 random bytes are "
                                 "usual), so it is not used")
        remember_key_material(entry.data[key])
        return value

    async def _fetch(self, namespace: str, name: str) -> dict[str, str] | SecretProblem:
        try:
            secret = await self._api.get(SECRETS.path(namespace, name))
        except ApiError as error:
            if error.status == 403:
                return SecretProblem(
                    f"the ingress may not read Secret {namespace}/{name}; the namespace owner grants it with a Role "
                    "limited to that name (resourceNames) bound to the ingress ServiceAccount, see docs/ingress.md")
            return SecretProblem(f"reading Secret {namespace}/{name} failed with {error.status}")
        if secret is None:
            return SecretProblem(f"Secret {namespace}/{name} does not exist")
        data: dict[str, str] = secret.get("data") or {}
        return data


def remember_key_material(encoded: str) -> None:
    """Redact a Secret value from the logs in the forms it takes: as stored, as text, as the key inside it.

    Forms shorter than MIN_SECRET_BYTES are not registered: they would blank ordinary words everywhere,
    and the ingress refuses a key that short anyway.
    """
    _remember(encoded)  # base64, as the API server returns it
    try:
        raw = base64.b64decode(encoded)
    except ValueError:
        return
    text = raw.decode("utf-8", "surrogateescape")
    _remember(text)
    for prefix in ("whsec_", "whpk_"):  # Standard Webhooks: the base64 after the prefix, and its bytes
        body = text.strip().removeprefix(prefix)
        if body != text.strip():
            _remember(body)
            with contextlib.suppress(ValueError):
                _remember(base64.b64decode(body).decode("utf-8", "surrogateescape"))


def _remember(form: str) -> None:
    if len(form.strip()) >= MIN_SECRET_BYTES:
        remember_secret(form)

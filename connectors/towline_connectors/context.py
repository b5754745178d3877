"""What an action is given to run: credentials, network guard, deadline, idempotency key.

Credentials arrive as a Kubernetes Secret volume per alias. Every value read
here is handed to the redactor before anything else happens. This module must
never log a credential value or include one in an exception message.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.httpxlib import httpx
from towline_connectors.models import CredentialRef
from towline_connectors.netguard import NetGuard
from towline_connectors.redact import Redactor
from towline_connectors.runtime import Deadline, SideEffectTracker
from towline_connectors.transport import Connector, build_client
from towline_step.attempt import StepContext

# A Secret volume keeps its real files in `..<timestamp>/` and links them via
# `..data`; those entries are bookkeeping, not keys.
_VOLUME_BOOKKEEPING_PREFIX = ".."
_MAX_CREDENTIAL_BYTES = 1024 * 1024


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _strip_final_newline(value: str) -> str:
    # `kubectl create secret --from-file` keeps a file's final newline; it is
    # never part of a token, and in a header it would make the request invalid.
    if value.endswith("\r\n"):
        return value[:-2]
    return value[:-1] if value.endswith("\n") else value


class CredentialStore:
    """Credential values by alias and key, as mounted for this step only."""

    def __init__(self, values: Mapping[str, Mapping[str, str]], secrets: Mapping[str, str] | None = None) -> None:
        self._values = {alias: dict(keys) for alias, keys in values.items()}
        self._secrets = dict(secrets or {})
        """alias -> Secret name, for messages only."""

    def aliases(self) -> list[str]:
        return sorted(self._values)

    def keys(self, alias: str) -> list[str]:
        """The key names mounted for `alias` (none when its Secret is missing or empty)."""
        return sorted(self._values.get(alias, {}))

    def find(self, alias: str, key: str) -> str | None:
        """The value, or None when `alias` is not mounted or lacks `key`."""
        return self._values.get(alias, {}).get(key)

    def get(self, ref: CredentialRef) -> str:
        """The value for `ref`; a missing alias or key is an error naming the fix."""
        keys = self._values.get(ref.credential)
        if keys is None:
            mounted = ", ".join(self.aliases()) or "none"
            raise ActionError(
                ErrorClass.VALIDATION,
                f"credential {ref.credential!r} is not mounted for this step (mounted: {mounted}); "
                f"add it to the step's `credentials` map",
            )
        if ref.key not in keys:
            secret = self._secrets.get(ref.credential)
            where = f"Secret {secret!r}" if secret else "the Secret"
            raise ActionError(
                ErrorClass.AUTH,
                f"credential {ref.credential!r} has no key {ref.key!r} (keys: {', '.join(sorted(keys)) or 'none'}); "
                f"add that key to {where}",
            )
        return keys[ref.key]


def read_secret_files(directory: Path) -> list[str]:
    """Every value under `directory`, bookkeeping copies included, for the redactor."""
    values: list[str] = []
    if not directory.is_dir():
        return values
    for root, _dirs, files in os.walk(directory, followlinks=False):
        for name in files:
            path = Path(root) / name
            try:
                if path.is_file():
                    values.append(_decode(path.read_bytes()[:_MAX_CREDENTIAL_BYTES]))
            except OSError:
                continue
    return values


def load_credentials(directory: Path, secrets: Mapping[str, str] | None = None) -> CredentialStore:
    """Read `<alias>/<key>` files (the Secret volume layout) into a store; `secrets` names each alias's Secret."""
    values: dict[str, dict[str, str]] = {}
    if not directory.is_dir():
        return CredentialStore(values, secrets)
    for alias_dir in sorted(directory.iterdir()):
        if alias_dir.name.startswith(_VOLUME_BOOKKEEPING_PREFIX) or not alias_dir.is_dir():
            continue
        keys: dict[str, str] = {}
        for key_file in sorted(alias_dir.iterdir()):
            if key_file.name.startswith(_VOLUME_BOOKKEEPING_PREFIX) or not key_file.is_file():
                continue
            keys[key_file.name] = _strip_final_newline(_decode(key_file.read_bytes()[:_MAX_CREDENTIAL_BYTES]))
        values[alias_dir.name] = keys
    return CredentialStore(values, secrets)


def default_ssl_context() -> ssl.SSLContext:
    """Verify against certifi's bundle, or SSL_CERT_FILE/SSL_CERT_DIR when the image sets one."""
    return httpx.create_ssl_context(trust_env=True)


@dataclass
class ActionContext(StepContext):
    """Everything an action may use: the step kit's view of an attempt, plus the runner's network guard and client.

    Tests build one directly; the runner builds it from env.
    """

    credentials: CredentialStore
    redactor: Redactor
    guard: NetGuard
    idempotency_key: str
    deadline: Deadline
    ssl_context: ssl.SSLContext = field(default_factory=default_ssl_context)
    side_effects: SideEffectTracker = field(default_factory=SideEffectTracker)
    connector: Connector | None = None
    clock: Callable[[], float] = time.time
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("towline_connectors"))
    traceparent: str | None = None
    """The attempt's W3C traceparent while the operator exports traces: outbound calls may carry it."""

    def secret(self, ref: CredentialRef) -> str:
        return self.credentials.get(ref)

    def optional_credential(self, slot: str, key: str) -> str | None:
        return self.credentials.find(slot, key)

    def register_secret(self, derived: str) -> None:
        """Redact a value derived from a credential (a Basic header, a signed URL)."""
        self.redactor.add(derived)

    def http_client(self, guard: NetGuard | None = None) -> httpx.AsyncClient:
        return build_client(guard or self.guard, self.side_effects, self.ssl_context, self.connector)

"""Before an action runs: is every Secret the step names actually there?

The operator mounts each credential's Secret as an optional volume, so a pod
whose Secret does not exist still starts (the kubelet would otherwise leave it
waiting with the reason only in an Event) and the mount is an empty directory.
The runner finds that here and ends the attempt with an `auth` failure naming
the Secret and how to create it; the result document lists the Secret names
under MISSING_SECRETS_FIELD, which the operator checks against the Secrets the
pod mounts. The failure carries names only (aliases, Secret names, the
namespace), never a value.

The pod mounts only the keys the step reads (the volume's `items`); a key the
Secret lacks is simply absent (the volume is optional), and is reported here the
same way, naming the Secret and the key.

  TOWLINE_CREDENTIAL_SECRETS  JSON object alias -> Secret name (the aliases the step reads)
  TOWLINE_CREDENTIAL_KEYS     JSON object alias -> the keys the step reads (absent: any key will do)
  TOWLINE_NAMESPACE           the run's namespace, for the fix command
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from towline_connectors.context import CredentialStore, load_credentials
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.result import StepResult
from towline_connectors.wire import CREDENTIAL_KEYS_ENV, CREDENTIAL_SECRETS_ENV


def credential_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """alias -> Secret name from the environment; a malformed value is a validation error naming it."""
    secrets = _json_object(environ, CREDENTIAL_SECRETS_ENV, "alias -> Secret name",
                           lambda name: isinstance(name, str) and bool(name))
    return {alias: str(name) for alias, name in secrets.items()}


def credential_keys(environ: Mapping[str, str]) -> dict[str, list[str]]:
    """alias -> the keys the step reads, from the environment; a malformed value is a validation error naming it."""
    keys = _json_object(environ, CREDENTIAL_KEYS_ENV, "alias -> [key, ...]",
                        lambda names: isinstance(names, list) and all(isinstance(k, str) and k for k in names))
    return {alias: list(names) for alias, names in keys.items()}


def _json_object(environ: Mapping[str, str], variable: str, shape: str, valid: Callable[[Any], bool]) -> dict[str, Any]:
    """The JSON object in `variable` (none: empty), each value `valid`; else a validation error naming it."""
    text = environ.get(variable, "").strip()
    if not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise ActionError(ErrorClass.VALIDATION, f"{variable} is not valid JSON ({exc})") from None
    if not isinstance(found, dict) or not all(isinstance(alias, str) and valid(v) for alias, v in found.items()):
        raise ActionError(ErrorClass.VALIDATION, f"{variable} must be a JSON object of {shape}")
    return found


def missing_secrets(secrets: Mapping[str, str], store: CredentialStore) -> list[str]:
    """The Secret names whose mount holds no key: the Secret does not exist (or is empty)."""
    return sorted({name for alias, name in secrets.items() if not store.keys(alias)})


def missing_keys(
    secrets: Mapping[str, str], keys: Mapping[str, list[str]], store: CredentialStore
) -> dict[str, list[str]]:
    """Secret name -> the keys the step reads that its mount lacks, for Secrets that are there."""
    found: dict[str, list[str]] = {}
    for alias, name in sorted(secrets.items()):
        mounted = store.keys(alias)
        absent = [key for key in keys.get(alias, []) if key not in mounted]
        if mounted and absent:
            found.setdefault(name, []).extend(k for k in absent if k not in found.get(name, []))
    return found


def missing_secrets_error(
    missing: list[str], secrets: Mapping[str, str], namespace: str,
    keys: Mapping[str, list[str]] | None = None, absent_keys: Mapping[str, list[str]] | None = None,
) -> ActionError:
    """The attempt's failure: which Secret (and key), for which credential, and the command that repairs it."""
    where = f" -n {namespace}" if namespace else ""
    parts = []
    for name in missing:
        aliases = [a for a, n in sorted(secrets.items()) if n == name]
        named = ", ".join(repr(a) for a in aliases)
        wanted = sorted({k for a in aliases for k in (keys or {}).get(a, [])})
        if wanted:
            literals = " ".join(f"--from-literal={k}=VALUE" for k in wanted)
            parts.append(
                f"Secret {name!r} (credential {named}) does not exist in this namespace or has none of the keys "
                f"the step reads ({', '.join(wanted)}); create it (kubectl create secret generic {name} {literals}"
                f"{where}) or fix the step's credentials, then resume the run"
            )
            continue
        parts.append(
            f"Secret {name!r} (credential {named}) does not exist in this namespace or has no keys; create it "
            f"(kubectl create secret generic {name} --from-literal=KEY=VALUE{where}) or fix the step's "
            "credentials, then resume the run"
        )
    for name, absent in sorted((absent_keys or {}).items()):
        holders = ", ".join(repr(a) for a, n in sorted(secrets.items()) if n == name)
        data = ",".join(f'"{k}":"VALUE"' for k in absent)
        parts.append(
            f"Secret {name!r} (credential {holders}) has no key {', '.join(repr(k) for k in absent)}, which the "
            f"step reads; add it (kubectl patch secret {name}{where} --type merge -p '{{\"stringData\":{{{data}}}}}') "
            "or fix the step's inputs, then resume the run"
        )
    return ActionError(ErrorClass.AUTH, "; ".join(parts))


def check_credentials(
    secrets: Mapping[str, str], namespace: str, credentials_dir: Path, keys: Mapping[str, list[str]] | None = None
) -> StepResult | None:
    """None when every Secret the step names has the keys it reads; else the attempt's failure, naming them."""
    try:
        store = load_credentials(credentials_dir, secrets)
    except OSError as exc:
        return StepResult.failure(ActionError(ErrorClass.TRANSIENT, f"could not read the step's credentials: {exc}"))
    missing = missing_secrets(secrets, store)
    absent = missing_keys(secrets, keys or {}, store)
    if not missing and not absent:
        return None
    error = missing_secrets_error(missing, secrets, namespace, keys, absent)
    return dataclasses.replace(StepResult.failure(error), missing_secrets=tuple(sorted({*missing, *absent})))

"""Before an action runs: is every Secret the step names actually there?

The operator mounts each credential's Secret as an optional volume, so a pod
whose Secret does not exist still starts (the kubelet would otherwise leave it
waiting with the reason only in an Event) and the mount is an empty directory.
The runner finds that here and ends the attempt with an `auth` failure naming
the Secret and how to create it; the result document lists the Secret names
under MISSING_SECRETS_FIELD, which the operator checks against the Secrets the
pod mounts. The failure carries names only (aliases, Secret names, the
namespace), never a value.

  TOWLINE_CREDENTIAL_SECRETS  JSON object alias -> Secret name (the step's `credentials`)
  TOWLINE_NAMESPACE           the run's namespace, for the fix command
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from towline_connectors.context import CredentialStore, load_credentials
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.result import StepResult
from towline_connectors.wire import CREDENTIAL_SECRETS_ENV


def credential_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """alias -> Secret name from the environment; a malformed value is a validation error naming it."""
    text = environ.get(CREDENTIAL_SECRETS_ENV, "").strip()
    if not text:
        return {}
    try:
        secrets = json.loads(text)
    except ValueError as exc:
        raise ActionError(ErrorClass.VALIDATION, f"{CREDENTIAL_SECRETS_ENV} is not valid JSON ({exc})") from None
    if not isinstance(secrets, dict) or not all(
        isinstance(alias, str) and isinstance(name, str) and name for alias, name in secrets.items()
    ):
        raise ActionError(
            ErrorClass.VALIDATION, f"{CREDENTIAL_SECRETS_ENV} must be a JSON object of alias -> Secret name"
        )
    return dict(secrets)


def missing_secrets(secrets: Mapping[str, str], store: CredentialStore) -> list[str]:
    """The Secret names whose mount holds no key: the Secret does not exist (or is empty)."""
    return sorted({name for alias, name in secrets.items() if not store.keys(alias)})


def missing_secrets_error(missing: list[str], secrets: Mapping[str, str], namespace: str) -> ActionError:
    """The attempt's failure: which Secret, for which credential, and the command that creates it."""
    where = f" -n {namespace}" if namespace else ""
    parts = []
    for name in missing:
        aliases = ", ".join(repr(a) for a, n in sorted(secrets.items()) if n == name)
        parts.append(
            f"Secret {name!r} (credential {aliases}) does not exist in this namespace or has no keys; create it "
            f"(kubectl create secret generic {name} --from-literal=KEY=VALUE{where}) or fix the step's "
            "credentials, then resume the run"
        )
    return ActionError(ErrorClass.AUTH, "; ".join(parts))


def check_credentials(secrets: Mapping[str, str], namespace: str, credentials_dir: Path) -> StepResult | None:
    """None when every Secret the step names has keys; else the attempt's failure, naming them."""
    try:
        store = load_credentials(credentials_dir, secrets)
    except OSError as exc:
        return StepResult.failure(ActionError(ErrorClass.TRANSIENT, f"could not read the step's credentials: {exc}"))
    missing = missing_secrets(secrets, store)
    if not missing:
        return None
    error = missing_secrets_error(missing, secrets, namespace)
    return dataclasses.replace(StepResult.failure(error), missing_secrets=tuple(missing))

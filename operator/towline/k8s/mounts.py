"""A step pod's credential volumes: exactly the Secret keys the step reads, nothing else of the Secret.

The keys come from the step's resolved inputs as the connector's metadata reads them
(`{credential: crm, key: token}`, a connector's default slot such as Slack's `url`). Each
Secret volume lists them under `items` and stays optional, so a missing Secret or key leaves
the file absent and the runner fails the attempt naming the Secret and the key. Names only:
this module never reads a Secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from towline.api.common import SECRET_KEY_PATTERN
from towline.api.steptype import ResolvedStepType
from towline.jsontypes import JSON
from towline_step.protocol import DEFAULT_CREDENTIALS_DIR

_SECRET_KEY = re.compile(SECRET_KEY_PATTERN)
"""What a Secret's data key may be (Kubernetes' rule); nothing else can be in a Secret, so nothing else is mounted."""



def credential_keys(refs: Iterable[tuple[str, str]], credentials: Mapping[str, str]) -> dict[str, list[str]]:
    """alias -> the keys of its Secret the step reads (`refs`, the catalog's `credential_refs` of its action and
    inputs), for the aliases the step names; sorted, no duplicates."""
    keys: dict[str, set[str]] = {}
    for alias, key in refs:
        if alias in credentials and _SECRET_KEY.match(key) and key not in (".", ".."):
            keys.setdefault(alias, set()).add(key)
    return {alias: sorted(found) for alias, found in sorted(keys.items())}


def slot_keys(step_type: ResolvedStepType, credentials: Mapping[str, str]) -> dict[str, list[str]]:
    """slot -> the keys a user step type declares, for the slots the step binds: the only keys its pod mounts."""
    return {slot.name: sorted(set(slot.keys)) for slot in step_type.spec.credentials if slot.name in credentials}


def credential_volumes(credentials: Mapping[str, str], keys: Mapping[str, list[str]]) -> tuple[list[JSON], list[JSON]]:
    """Volumes and read-only mounts for the aliases in `keys`, each holding only those keys of its Secret.

    An alias the step names but never reads gets no volume: an empty `items` would mount every key.
    """
    volumes: list[JSON] = []
    mounts: list[JSON] = []
    for alias, names in sorted(keys.items()):
        if not names:
            continue
        volume = f"cred-{alias.replace('_', '-')}"
        # Optional: a missing Secret or key leaves its file absent, so the pod starts and the runner fails
        # the attempt naming it (a required one leaves the pod waiting, the reason only in an Event).
        volumes.append({"name": volume, "secret": {
            "secretName": credentials[alias], "defaultMode": 0o440, "optional": True,
            "items": [{"key": name, "path": name} for name in names],
        }})
        mounts.append({"name": volume, "mountPath": f"{DEFAULT_CREDENTIALS_DIR}/{alias}", "readOnly": True})
    return volumes, mounts

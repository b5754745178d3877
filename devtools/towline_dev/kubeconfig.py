"""Who may talk to the local control plane, and the kubeconfig files that say how.

The API server authenticates everyone with static bearer tokens (`--token-auth-file`),
generated per start. The people are fixed so tests and humans can rely on them:

- ``admin``  (group ``system:masters``): everything.
- ``alice``  (group ``team-a``), ``carol`` (group ``team-a``),
  ``bob``    (groups ``team-b``, ``approvers``): nothing until RBAC grants it.

Components get identities of their own (the controller manager's is the one its
bootstrap RBAC role is bound to). Token values are written only to files with
mode 0600 inside the state directory; they are never logged.
"""

from __future__ import annotations

import base64
import csv
import io
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CLUSTER_NAME = "towline-dev"


@dataclass(frozen=True)
class DevUser:
    name: str
    groups: tuple[str, ...]


PEOPLE: tuple[DevUser, ...] = (
    DevUser("admin", ("system:masters",)),
    DevUser("alice", ("team-a",)),
    DevUser("bob", ("team-b", "approvers")),
    DevUser("carol", ("team-a",)),
)
"""Users with a context in the kubeconfig handed to people and tests. The first is the default."""

CONTROLLER_MANAGER = DevUser("system:kube-controller-manager", ())
"""Bound to the bootstrap ClusterRole system:kube-controller-manager by the API server itself."""

ALL_USERS: tuple[DevUser, ...] = (*PEOPLE, CONTROLLER_MANAGER)


def new_tokens(users: tuple[DevUser, ...] = ALL_USERS) -> dict[str, str]:
    """A fresh random bearer token per user name."""
    return {user.name: secrets.token_urlsafe(32) for user in users}


def token_file_text(tokens: Mapping[str, str], users: tuple[DevUser, ...] = ALL_USERS) -> str:
    """The CSV the API server's --token-auth-file reads: token,user,uid,"group1,group2"."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    for user in users:
        row = [tokens[user.name], user.name, f"uid-{user.name}"]
        if user.groups:
            row.append(",".join(user.groups))
        writer.writerow(row)
    return out.getvalue()


def context_name(user: str) -> str:
    """The kubeconfig context for a user: simply the user's name (`kubectl --context bob`)."""
    return user


def build_kubeconfig(
    *,
    server: str,
    ca_pem: bytes,
    tokens: Mapping[str, str],
    users: tuple[str, ...],
    current: str,
) -> dict[str, Any]:
    """A kubeconfig document with one cluster, and one user and one context per user name."""
    if current not in users:
        raise ValueError(f"current user {current!r} is not one of {users}")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": tokens[name]}} for name in users],
        "contexts": [
            {"name": context_name(name), "context": {"cluster": CLUSTER_NAME, "user": name}}
            for name in users
        ],
        "current-context": context_name(current),
    }


def write_private_file(path: Path, text: str) -> None:
    """Create (or replace) a file readable by its owner only, without a window where it is wider."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    temporary.touch(mode=0o600)
    temporary.write_text(text)
    temporary.replace(path)


def write_kubeconfig(path: Path, document: Mapping[str, Any]) -> Path:
    write_private_file(path, yaml.safe_dump(dict(document), sort_keys=False))
    return path

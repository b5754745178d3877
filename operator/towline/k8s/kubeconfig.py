"""Which kubeconfig a process uses, read the way kubectl reads it, and the connection it describes.

`--kubeconfig FILE` names exactly one file, which must exist. Otherwise every
file of `$KUBECONFIG` (`a:b`, `;` on Windows) is merged with kubectl's rule,
"the first file to set a value wins": the first context, cluster or user of a
name is kept and the first non-empty `current-context` is the current one.
Without `$KUBECONFIG` it is `~/.kube/config`. A relative path in an entry is
relative to the file that holds the entry, as kubectl resolves it.

The connection (`load`) is built here for what a kubeconfig says directly: the
cluster's `server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`,
`tls-server-name`, `proxy-url`; the user's `token`, `tokenFile`,
`client-certificate(-data)` with `client-key(-data)`, `username`/`password`. A
user with an `exec` credential plugin or an `auth-provider` is handed to
`towline.k8s.kubeconfigplugins`, the one place that imports kubernetes-asyncio.
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

import yaml

from towline.jsontypes import JSON
from towline.k8s.connection import (
    Connection,
    ConnectionProblem,
    Credential,
    NoCredential,
    StaticCredential,
    TokenFile,
    tls_context,
)

PATH_SEPARATOR = ";" if os.name == "nt" else ":"
PATH_KEYS = {"clusters": ("certificate-authority",), "users": ("client-certificate", "client-key", "tokenFile")}
"""The entries' fields that name files (resolved against the directory of the file that holds the entry)."""



KubeconfigProblem = ConnectionProblem
"""No kubeconfig file, an unreadable one, a context it does not define, or settings that make no connection."""


def paths(kubeconfig: str | None) -> list[Path]:
    """The files to read, in kubectl's order of precedence (missing entries of $KUBECONFIG are skipped)."""
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        return [Path(part).expanduser() for part in listed.split(PATH_SEPARATOR) if part]
    return [Path.home() / ".kube" / "config"]


def merged(kubeconfig: str | None) -> JSON:
    """The merged document (clusters, users, contexts, current-context); raises KubeconfigProblem with the fix
    when there is none."""
    files = paths(kubeconfig)
    if kubeconfig and not files[0].is_file():
        raise KubeconfigProblem(f"--kubeconfig {kubeconfig}: no such file")
    present = [path for path in files if path.is_file()]
    if not present:
        where = "$KUBECONFIG (" + os.environ["KUBECONFIG"] + ")" if os.environ.get("KUBECONFIG") else str(files[0])
        raise KubeconfigProblem(f"no kubeconfig found at {where}; set KUBECONFIG or pass --kubeconfig FILE")
    result: JSON = {"clusters": [], "users": [], "contexts": []}
    for path in present:
        document = _read(path)
        if not result.get("current-context") and document.get("current-context"):
            result["current-context"] = str(document["current-context"])
        for section in ("clusters", "users", "contexts"):
            known = {entry["name"] for entry in result[section]}
            for entry in _entries(document, section, path):
                if entry["name"] not in known:
                    known.add(entry["name"])
                    result[section].append(entry)
    return result


def _read(path: Path) -> JSON:
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise KubeconfigProblem(f"cannot read kubeconfig {path}: {_one_line(error)}") from error
    if not isinstance(document, dict):
        raise KubeconfigProblem(f"kubeconfig {path} is not a mapping")
    return document


def _entries(document: JSON, section: str, path: Path) -> list[JSON]:
    """The section's named entries, their file fields made absolute against `path`'s directory."""
    entries = document.get(section) or []
    if not isinstance(entries, list):
        raise KubeconfigProblem(f"kubeconfig {path}: {section} must be a list of named entries")
    kind = section[:-1]
    found = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise KubeconfigProblem(f"kubeconfig {path}: every entry of {section} needs a name")
        body = entry.get(kind) or {}
        if not isinstance(body, dict):
            raise KubeconfigProblem(f"kubeconfig {path}: {section} {entry['name']}: {kind} must be a mapping")
        body = dict(body)
        for key in PATH_KEYS.get(section, ()):
            if isinstance(body.get(key), str) and body[key]:
                body[key] = str(path.parent / Path(body[key]).expanduser())
        found.append({"name": entry["name"], kind: body})
    return found


def _named(document: JSON, section: str, name: str) -> JSON | None:
    kind = section[:-1]
    return next((dict(entry[kind]) for entry in document[section] if entry["name"] == name), None)


def current_context(kubeconfig: str | None, context: str | None) -> JSON:
    """The `context` entry of the context in use (`--context`, else current-context); {} when none is set."""
    document = merged(kubeconfig)
    wanted = context or document.get("current-context")
    found = _named(document, "contexts", wanted) if wanted else None
    if found is not None:
        return found
    if context:
        raise KubeconfigProblem(f"--context {context}: no such context in the kubeconfig")
    return {}


def namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the context in use (as kubectl picks it), else `default`."""
    return str(current_context(kubeconfig, context).get("namespace") or "default")


async def load(kubeconfig: str | None, context: str | None) -> Connection:
    """The connection the merged kubeconfig's chosen context describes; raises KubeconfigProblem naming what is
    missing and the fix."""
    document = merged(kubeconfig)
    name = context or document.get("current-context")
    if not name:
        raise KubeconfigProblem("kubeconfig: no current-context is set; pass --context NAME or run "
                                "`kubectl config use-context NAME`")
    chosen = _named(document, "contexts", name)
    if chosen is None:
        flag = f"--context {name}" if context else f"current-context {name}"
        raise KubeconfigProblem(f"{flag}: no such context in the kubeconfig")
    cluster_name = chosen.get("cluster")
    cluster = _named(document, "clusters", cluster_name) if cluster_name else None
    if cluster is None:
        raise KubeconfigProblem(f"kubeconfig: context {name} names the cluster {cluster_name!r}, which no "
                                "clusters entry defines")
    user = (_named(document, "users", chosen["user"]) if chosen.get("user") else None) or {}
    _check_cluster(cluster, f"cluster {cluster_name}")
    if "exec" in user or "auth-provider" in user:
        from towline.k8s import kubeconfigplugins  # noqa: PLC0415 - loads kubernetes-asyncio: only for these users

        return await kubeconfigplugins.load(document, name)
    return connection(cluster, user, f"cluster {cluster_name}", f"user {chosen.get('user')}")


def connection(cluster: JSON, user: JSON, cluster_label: str, user_label: str) -> Connection:
    """A cluster entry and a user entry (file fields absolute) as a connection."""
    _check_cluster(cluster, cluster_label)
    server = str(cluster["server"]).rstrip("/")
    insecure = cluster.get("insecure-skip-tls-verify") is True
    ca_data = _data(cluster, "certificate-authority-data", cluster_label)
    ca_file = cluster.get("certificate-authority") or None
    tls = None
    if server.startswith("https"):
        client_cert = _data(user, "client-certificate-data", user_label) or user.get("client-certificate") or None
        client_key = _data(user, "client-key-data", user_label) or user.get("client-key") or None
        try:
            tls = tls_context(ca_file=ca_file, ca_data=ca_data, insecure=insecure, client_cert=client_cert,
                              client_key=client_key)
        except ConnectionProblem as problem:
            raise KubeconfigProblem(f"kubeconfig {cluster_label}, {user_label}: {problem}") from None
    try:
        token = credential(user, user_label)
    except ConnectionProblem as problem:
        raise KubeconfigProblem(f"kubeconfig {user_label}: {problem}") from None
    return Connection(server=server, tls=tls, credential=token, proxy=cluster.get("proxy-url") or None,
                      server_name=cluster.get("tls-server-name") or None)


def _check_cluster(cluster: JSON, label: str) -> None:
    """What kubectl refuses too: no server, or TLS verification both configured and switched off."""
    if not cluster.get("server"):
        raise KubeconfigProblem(f"kubeconfig {label}: no server; set clusters[].cluster.server (https://HOST:PORT)")
    if cluster.get("insecure-skip-tls-verify") is True and (
            cluster.get("certificate-authority-data") or cluster.get("certificate-authority")):
        raise KubeconfigProblem(f"kubeconfig {label}: insecure-skip-tls-verify is set together with a "
                                "certificate-authority; remove one of them (kubectl refuses both too)")


def credential(user: JSON, user_label: str) -> Credential:
    """A user entry's token (as kubectl: `token` before `tokenFile`), else its basic auth, else none."""
    if user.get("token"):
        return StaticCredential(f"Bearer {user['token']}")
    if user.get("tokenFile"):
        return TokenFile(Path(user["tokenFile"]))
    if user.get("username") and user.get("password"):
        pair = f"{user['username']}:{user['password']}".encode()
        return StaticCredential("Basic " + base64.b64encode(pair).decode("ascii"))
    return NoCredential()


def _data(entry: JSON, key: str, label: str) -> bytes | None:
    value = entry.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigProblem(f"kubeconfig {label}: {key} is not base64; it holds the PEM text base64-encoded "
                                "(base64 -w0 FILE)") from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())

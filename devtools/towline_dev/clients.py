"""Kubernetes API clients for one user of the local control plane (tests and dev tooling).

Kept apart from `controlplane` so the control plane itself needs no client library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config


@dataclass(frozen=True)
class KubeClients:
    """The typed APIs most tests need, all sharing one `ApiClient` authenticated as `user`."""

    user: str
    api_client: client.ApiClient
    core: client.CoreV1Api
    batch: client.BatchV1Api
    rbac: client.RbacAuthorizationV1Api
    coordination: client.CoordinationV1Api
    custom: client.CustomObjectsApi
    apiextensions: client.ApiextensionsV1Api
    admissionregistration: client.AdmissionregistrationV1Api
    networking: client.NetworkingV1Api

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]


def clients_from_kubeconfig(kubeconfig: Path, context: str | None = None) -> KubeClients:
    """Clients for the context (by default the current one) of a kubeconfig file."""
    api = config.new_client_from_config(config_file=str(kubeconfig), context=context)  # type: ignore[no-untyped-call]
    contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    chosen = next((c for c in contexts if c["name"] == context), current) if context else current
    _impersonate_as_kubeconfig_says(api, kubeconfig, str(chosen["context"]["user"]))
    return KubeClients(
        user=str(chosen["context"]["user"]),
        api_client=api,
        core=client.CoreV1Api(api),
        batch=client.BatchV1Api(api),
        rbac=client.RbacAuthorizationV1Api(api),
        coordination=client.CoordinationV1Api(api),
        custom=client.CustomObjectsApi(api),
        apiextensions=client.ApiextensionsV1Api(api),
        admissionregistration=client.AdmissionregistrationV1Api(api),
        networking=client.NetworkingV1Api(api),
    )


def _impersonate_as_kubeconfig_says(api: client.ApiClient, kubeconfig: Path, user: str) -> None:
    """Honour a user entry's `as` / `as-groups` (as kubectl does; the client library ignores them).

    Used with an existing cluster, where the tests' people are the admin impersonating them.
    Each group is its own Impersonate-Group header, as the API server requires.
    """
    document = yaml.safe_load(kubeconfig.read_text()) or {}
    entry = next((u.get("user") or {} for u in document.get("users", []) if u.get("name") == user), {})
    impersonated = entry.get("as")
    if not impersonated:
        return
    groups = [str(g) for g in entry.get("as-groups") or []]
    pool: Any = api.rest_client.pool_manager
    send = pool.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        merged = urllib3.HTTPHeaderDict(dict(kwargs.pop("headers", None) or {}))
        merged["Impersonate-User"] = str(impersonated)
        for group in groups:
            merged.add("Impersonate-Group", group)
        return send(method, url, *args, headers=merged, **kwargs)

    pool.request = request


def raw_json(response: object) -> Any:
    """The JSON body of a call made with `_preload_content=False`.

    The generated client annotates such calls with the model type although they
    return the raw HTTP response; used where the model cannot parse the answer
    (pod binding) or where the plain dict is what the caller wants.
    """
    return json.loads(response.data)  # type: ignore[attr-defined]

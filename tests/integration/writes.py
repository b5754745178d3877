"""Creating objects as the admin from the test process: one HTTPS POST, no kubectl process.

Tests set their scene as the cluster's admin (Workflows, RoleBindings, Secrets) hundreds of times a run, and
each `kubectl apply` is a process of about 80 ms of CPU (docs/benchmarks.md). An object that does not exist yet
is created here as kubectl would create it: `kubectl apply` records the manifest in the
last-applied-configuration annotation (so a later `kubectl apply` of a changed manifest, by a person or the
admin, merges three ways as before), both send field manager and strict field validation as kubectl does.
Anything else (the object exists, the server refuses, a manifest this does not handle, an existing
cluster) is left to kubectl, which updates the object or reports the refusal in its own words. People's
actions always go through kubectl.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from dataclasses import replace
from typing import Any

from tests.integration.reads import ReadError, resource

from towline_dev.controlplane import ControlPlane

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
APPLY_MANAGER = "kubectl-client-side-apply"
CREATE_MANAGER = "kubectl-create"


def create_as_kubectl(
    cluster: ControlPlane, manifest: dict[str, Any], *, applied: bool
) -> subprocess.CompletedProcess[str] | None:
    """`manifest` created as the admin, as `kubectl apply` (`applied`) or `kubectl create` creates it, with what
    kubectl prints; None when it was not created here and kubectl should do what it does."""
    metadata: dict[str, Any] = manifest.get("metadata") or {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not (isinstance(name, str) and isinstance(api_version, str) and isinstance(kind, str) and name and kind):
        return None  # generateName, a List, or a manifest kubectl should judge
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    try:
        found = resource(cluster, f"{kind.lower()}.{group}" if group else kind.lower())
    except (OSError, ReadError):
        return None
    if found.kind != kind or (found.namespaced and not isinstance(namespace, str)):
        return None  # kubectl would use its context's namespace: let it
    body = manifest
    if applied:
        # What kubectl records: the manifest with its annotations (an empty map if none), in Go's JSON (sorted
        # keys, no spaces), and a newline.
        annotations = {key: value for key, value in (metadata.get("annotations") or {}).items()
                       if key != LAST_APPLIED}
        recorded = json.dumps({**manifest, "metadata": {**metadata, "annotations": annotations}},
                              sort_keys=True, separators=(",", ":")) + "\n"
        body = {**manifest, "metadata": {**metadata, "annotations": {**annotations, LAST_APPLIED: recorded}}}
    # The manifest's own version, which need not be the one discovery prefers.
    collection = replace(found, base="/api/v1" if api_version == "v1" else f"/apis/{api_version}").path(namespace)
    query = urllib.parse.urlencode({"fieldManager": APPLY_MANAGER if applied else CREATE_MANAGER,
                                    "fieldValidation": "Strict"})
    try:
        status, _ = cluster.api_request("POST", f"{collection}?{query}",
                                        body=json.dumps(body).encode(), timeout=30.0)
    except OSError:
        return None
    if status != 201:
        return None
    shown = f"{kind.lower()}.{group}/{name}" if group else f"{kind.lower()}/{name}"
    verb = "apply" if applied else "create"
    return subprocess.CompletedProcess([verb, "-f", "-"], 0, stdout=f"{shown} created\n", stderr="")

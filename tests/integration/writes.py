"""Creating objects as the admin from the test process: one HTTPS POST, no kubectl process.

Tests set their scene as the cluster's admin (Workflows, RoleBindings, Secrets) hundreds of times a run, and
each `kubectl apply` is a process of about 80 ms of CPU (docs/benchmarks.md). An object that does not exist yet
is created here as kubectl would create it: `kubectl apply` records the manifest in the
last-applied-configuration annotation (so a later `kubectl apply` of a changed manifest, by a person or the
admin, merges three ways as before), both send field manager and strict field validation as kubectl does.
Anything else (the object exists, the server refuses, a manifest this does not handle, an existing
cluster) is left to kubectl, which updates the object or reports the refusal in its own words.

A person's `kubectl create -f -` is one POST with their token, and so is a ServiceAccount's create (a compromised
operator's Jobs and pods in the attack tests, hundreds a run): `create_from_here` sends it from here too and answers
in kubectl's words, refusals included (`test_support_writes.py` compares them with kubectl's). What else a person
does (apply, which reads the object first; patch; the plugin) goes through kubectl.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from dataclasses import replace
from typing import Any

from tests.integration.reads import ReadError, resource, until_not_throttled

from towline_dev.controlplane import ControlPlane

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
APPLY_MANAGER = "kubectl-client-side-apply"
CREATE_MANAGER = "kubectl-create"


def create_as_kubectl(
    cluster: ControlPlane, manifest: dict[str, Any], *, applied: bool
) -> subprocess.CompletedProcess[str] | None:
    """`manifest` created as the admin, as `kubectl apply` (`applied`) or `kubectl create` creates it, with what
    kubectl prints; None when it was not created here and kubectl should do what it does."""
    where = _collection(cluster, manifest)
    if where is None:
        return None
    collection, shown = where
    metadata: dict[str, Any] = manifest.get("metadata") or {}
    body = manifest
    if applied:
        # What kubectl records: the manifest with its annotations (an empty map if none), in Go's JSON (sorted
        # keys, no spaces), and a newline.
        annotations = {key: value for key, value in (metadata.get("annotations") or {}).items()
                       if key != LAST_APPLIED}
        recorded = json.dumps({**manifest, "metadata": {**metadata, "annotations": annotations}},
                              sort_keys=True, separators=(",", ":")) + "\n"
        body = {**manifest, "metadata": {**metadata, "annotations": {**annotations, LAST_APPLIED: recorded}}}
    query = urllib.parse.urlencode({"fieldManager": APPLY_MANAGER if applied else CREATE_MANAGER,
                                    "fieldValidation": "Strict"})
    try:
        status, _ = cluster.api_request("POST", f"{collection}?{query}",
                                        body=json.dumps(body).encode(), timeout=30.0)
    except OSError:
        return None
    if status != 201:
        return None
    verb = "apply" if applied else "create"
    return subprocess.CompletedProcess([verb, "-f", "-"], 0, stdout=f"{shown} created\n", stderr="")


def create_from_here(
    cluster: ControlPlane, manifest: dict[str, Any], *, user: str = "admin", token: str | None = None,
    dry_run: bool = False,
) -> subprocess.CompletedProcess[str] | None:
    """`manifest` created (or, `dry_run`, only admitted: `kubectl create --dry-run=server`) by `user` (a person of
    the control plane's kubeconfig), or by the bearer of `token`, with kubectl's exit status and words: what it
    prints when created, or its words for the API server's refusal (not the warnings kubectl would print beside:
    a test about them runs kubectl). None when it was not sent from here (kubectl should send it)."""
    where = _collection(cluster, manifest)
    if where is None:
        return None
    collection, shown = where
    options = {"fieldManager": CREATE_MANAGER, "fieldValidation": "Strict", **({"dryRun": "All"} if dry_run else {})}
    path = f"{collection}?{urllib.parse.urlencode(options)}"
    try:
        status, answer = until_not_throttled(lambda: cluster.api_request(
            "POST", path, body=json.dumps(manifest).encode(), timeout=30.0, user=user, token=token))
    except (OSError, KeyError):  # not answering, or a user without a token of the plane's: kubectl's to say
        return None
    if status == 501:
        return None
    argv = ["create", *(["--dry-run=server"] if dry_run else []), "-f", "-"]
    if status == 201 or (dry_run and status == 200):
        done = " (server dry run)" if dry_run else ""
        return subprocess.CompletedProcess(argv, 0, stdout=f"{shown} created{done}\n", stderr="")
    return subprocess.CompletedProcess(argv, 1, stdout="", stderr=kubectls_refusal(answer))


def kubectls_refusal(answer: bytes) -> str:
    """What `kubectl create -f -` prints for the API server's refusal `answer` (a Status), as its error printer
    (`cmdutil.CheckErr`) words it: an invalid object by its causes, anything else by the server's message."""
    try:
        refusal: dict[str, Any] = json.loads(answer)
    except ValueError:
        refusal = {"message": answer.decode(errors="replace")}
    reason = str(refusal.get("reason") or "")
    message = f'error when creating "STDIN": {refusal.get("message") or ""}'
    if reason == "Unauthorized":
        return "error: You must be logged in to the server (Unauthorized)\n"
    if reason != "Invalid":
        return f"Error from server ({reason}): {message}\n" if reason else f"Error from server: {message}\n"
    details = refusal.get("details")
    if not isinstance(details, dict):
        return f"The request is invalid: {message}\n"
    kind, name = details.get("kind") or "", details.get("name") or ""
    head = f'The {kind} "{name}" is invalid' if kind or name else "The request is invalid"
    causes = list(dict.fromkeys(f"{cause.get('field') or ''}: {cause.get('message') or ''}"
                                for cause in details.get("causes") or []))
    if not causes:
        return f"{head}\n"
    if len(causes) == 1:
        return f"{head}: {causes[0]}\n"
    return f"{head}: \n" + "".join(f"* {cause}\n" for cause in causes)


def _collection(cluster: ControlPlane, manifest: dict[str, Any]) -> tuple[str, str] | None:
    """Where `manifest` is created (its collection's path, in the manifest's own version, which need not be the one
    discovery prefers) and how kubectl names it (`job.batch/NAME`); None for what kubectl should judge."""
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
    collection = replace(found, base="/api/v1" if api_version == "v1" else f"/apis/{api_version}").path(namespace)
    return collection, f"{kind.lower()}.{group}/{name}" if group else f"{kind.lower()}/{name}"

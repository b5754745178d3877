"""The objects `kubectl towline` writes, and the manifest it exports. Pure."""

from __future__ import annotations

import copy
import json

from towline.jsontypes import JSON

RUN_API_VERSION = "towline.dev/v1alpha1"

# Metadata a GitOps tool or kubectl sets: never part of a manifest a person commits.
TOOL_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration", "argocd.argoproj.io/tracking-id")
TOOL_LABEL_PREFIXES = ("kustomize.toolkit.fluxcd.io/",)


class UsageError(ValueError):
    """A command line the plugin cannot act on; the message says how to fix it."""


def parse_params(pairs: list[str]) -> JSON:
    """`-p k=v`: a JSON value when `v` parses as one (numbers, booleans, lists), else the string."""
    params: JSON = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"-p {pair!r}: write a param as NAME=VALUE, e.g. -p threshold_days=30")
        try:
            params[name] = json.loads(raw)
        except ValueError:
            params[name] = raw
    return params


def run_manifest(workflow: str, params: JSON, requested_by: str) -> JSON:
    return {
        "apiVersion": RUN_API_VERSION, "kind": "WorkflowRun",
        "metadata": {"generateName": f"{workflow[:57]}-"},
        "spec": {"workflowRef": {"name": workflow}, "params": params, "requestedBy": requested_by},
    }


def reusable_steps(run: JSON) -> list[str]:
    """The finished run's Succeeded main-DAG steps whose needs are all reusable too; never an approval."""
    status = run.get("status") or {}
    phases = {entry["id"]: entry.get("phase") for entry in status.get("steps") or []}
    reuse: list[str] = []
    for step in (status.get("workflowSpec") or {}).get("steps") or []:
        if step.get("approval") is not None or phases.get(step["id"]) != "Succeeded":
            continue
        if all(need in reuse for need in step.get("needs") or []):
            reuse.append(step["id"])
    return reuse


def retry_manifest(run: JSON, requested_by: str) -> JSON:
    """A new run of the same workflow that reuses the finished run's reusable steps."""
    workflow = run["spec"]["workflowRef"]["name"]
    return {
        "apiVersion": RUN_API_VERSION, "kind": "WorkflowRun",
        "metadata": {"generateName": f"{workflow[:57]}-"},
        "spec": {
            "workflowRef": {"name": workflow},
            "requestedBy": requested_by,
            "retryOf": {"run": run["metadata"]["name"], "reuse": reusable_steps(run)},
        },
    }


def clean_workflow(workflow: JSON) -> JSON:
    """A manifest to commit: no status, no server-set or tool-set metadata.

    A Workflow's spec holds Secret names only (never values), so the spec is kept as it is.
    """
    meta = workflow.get("metadata") or {}
    clean_meta: JSON = {"name": meta["name"]}
    if meta.get("namespace"):
        clean_meta["namespace"] = meta["namespace"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items()
              if not k.startswith(TOOL_LABEL_PREFIXES) and k != "app.kubernetes.io/instance"}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k not in TOOL_ANNOTATIONS and not k.startswith(TOOL_LABEL_PREFIXES)}
    if labels:
        clean_meta["labels"] = labels
    if annotations:
        clean_meta["annotations"] = annotations
    return {
        "apiVersion": workflow.get("apiVersion", RUN_API_VERSION),
        "kind": "Workflow",
        "metadata": clean_meta,
        "spec": copy.deepcopy(workflow.get("spec") or {}),
    }

"""Workflow manifests that more than one test module runs: each names the behaviour its steps exercise.

A test's own one-off Workflow stays in its module; one here is shared, so changing it changes every test that
applies it.
"""

from __future__ import annotations

from typing import Any


def release_workflow(namespace: str, api: str, **overrides: Any) -> dict[str, Any]:
    """Three action steps, a branch that is skipped, and a four-eyes approval before the mutation."""
    approval = {"message": "Release ${{ steps.check.output.version }}?",
                "approvers": {"users": ["bob", "carol"]}, "fourEyes": True, "expiresAfter": "10m"}
    approval.update(overrides.pop("approval", {}))
    return {
        "apiVersion": "towline.dev/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": overrides.pop("name", "release"), "namespace": namespace},
        "spec": {
            "params": [{"name": "env", "type": "string", "default": "staging"}],
            "steps": [
                {"id": "check", "action": "http.request",
                 "with": {"url": f"{api}/status", "select": "response.body"},
                 "retry": {"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1}},
                {"id": "page_oncall", "needs": ["check"], "when": "params.env == 'production'",
                 "action": "data.transform", "with": {"data": {}, "fields": {"paged": "true"}}},
                {"id": "review", "needs": ["check"], "approval": approval},
                {"id": "release", "needs": ["review"], "action": "http.request",
                 "with": {"url": f"{api}/release", "method": "POST",
                          "json": {"version": "${{ steps.check.output.version }}"}}},
            ],
            **overrides,
        },
    }


def three_steps(namespace: str, api: str) -> dict[str, Any]:
    """Three HTTP steps in a chain, each feeding the next its output; the last is never retried."""
    http = {"action": "http.request"}
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "sync", "namespace": namespace},
        "spec": {"steps": [
            {"id": "fetch", **http, "with": {"url": f"{api}/fetch", "select": "response.body"}},
            {"id": "shape", "needs": ["fetch"], **http,
             "with": {"url": f"{api}/shape", "method": "POST", "json": {"n": "${{ steps.fetch.output.n }}"},
                      "select": "response.body"}},
            {"id": "push", "needs": ["shape"], **http, "retry": {"limit": 0},
             "with": {"url": f"{api}/push", "method": "POST", "json": {"total": "${{ steps.shape.output.total }}"}}},
        ]},
    }


def one_at_a_time(namespace: str) -> dict[str, Any]:
    """One run at a time (policy.maxConcurrentRuns 1): a gate only bob decides holds the slot, then one step."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "deploy", "namespace": namespace},
        "spec": {
            "policy": {"maxConcurrentRuns": 1},
            "steps": [
                {"id": "review", "approval": {"approvers": {"users": ["bob"]}, "expiresAfter": "10m"}},
                {"id": "apply", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {}, "fields": {"applied": "true"}}},
            ],
        },
    }

"""Waiting until the API server's authorizer has seen a RoleBinding or ClusterRoleBinding just written.

The RBAC authorizer decides from its own informer's cache, so a binding the API server has stored may not yet
grant anything: a person's request sent right after it can be refused. kubectl's process start used to hide the
gap; creates sent from the test process (tests/integration/writes.py) met it (a runner's create refused just after
their RoleBinding was created, in a CI run). Kubernetes' own e2e tests wait the same way
(`WaitForNamedAuthorizationUpdate`): a SubjectAccessReview for each subject, asked until it is allowed.
"""

from __future__ import annotations

import json
from typing import Any

from tests.integration.reads import read_object
from tests.integration.waiting import wait_for

from towline_dev.controlplane import ControlPlane

BINDING_KINDS = ("RoleBinding", "ClusterRoleBinding")
BOUND_WITHIN_SECONDS = 60.0
"""How long the authorizer may take to see a binding before the test fails saying so (it takes milliseconds;
a loaded 2-core machine, a few hundred)."""
PROBE_USER = "towline-binding-probe"
"""Who stands in for a Group subject: a user no test binds, so only the group's grant can allow the review."""


def until_bound(cluster: ControlPlane, binding: dict[str, Any], *, within: float = BOUND_WITHIN_SECONDS) -> None:
    """Return once every subject of `binding` (as written) may do what the first rule of its role grants, as the
    authorizer decides; at once when there is nothing to ask (the role is absent or has no rule, as an aggregated
    role before the controller fills it)."""
    if binding.get("kind") not in BINDING_KINDS:
        return
    metadata = binding.get("metadata") or {}
    namespace = metadata.get("namespace") if binding["kind"] == "RoleBinding" else None
    attributes = _first_grant(cluster, binding.get("roleRef") or {}, namespace)
    if attributes is None:
        return
    for subject in binding.get("subjects") or []:
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {**_who(subject, metadata.get("namespace")), **attributes}}
        wait_for(f"{binding['kind']} {metadata.get('name')} to take effect: the authorizer still refuses "
                 f"{subject} {review['spec']}", lambda review=review: _allowed(cluster, review), within, 0.05)


def _first_grant(cluster: ControlPlane, role_ref: dict[str, Any], namespace: str | None) -> dict[str, Any] | None:
    """The SubjectAccessReview attributes of one request the role's first rule allows, or None."""
    kind = "clusterroles" if role_ref.get("kind") == "ClusterRole" else "roles"
    role = read_object(cluster, kind, str(role_ref.get("name") or ""), namespace or "")
    rules: list[dict[str, Any]] = (role or {}).get("rules") or []
    if not rules:
        return None
    rule = rules[0]
    verbs = [verb for verb in rule.get("verbs") or [] if verb != "*"] or ["get"]
    if rule.get("nonResourceURLs"):
        path = str(rule["nonResourceURLs"][0]).rstrip("*") or "/"
        return {"nonResourceAttributes": {"path": path, "verb": verbs[0]}}
    groups = [group for group in rule.get("apiGroups") or [""] if group != "*"] or [""]
    resources = [name for name in rule.get("resources") or [] if name != "*"] or ["pods"]
    resource, _, subresource = resources[0].partition("/")
    attributes: dict[str, Any] = {"verb": verbs[0], "group": groups[0], "resource": resource}
    if subresource and subresource != "*":
        attributes["subresource"] = subresource
    if namespace:
        attributes["namespace"] = namespace
    if rule.get("resourceNames"):
        attributes["name"] = rule["resourceNames"][0]
    return {"resourceAttributes": attributes}


def _who(subject: dict[str, Any], binding_namespace: str | None) -> dict[str, Any]:
    """The review's user and groups for one subject, as the authenticator would present them."""
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "Group":
        return {"user": PROBE_USER, "groups": [name]}
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace or ""
        return {"user": f"system:serviceaccount:{namespace}:{name}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]}
    return {"user": name, "groups": ["system:authenticated"]}


def _allowed(cluster: ControlPlane, review: dict[str, Any]) -> bool:
    try:
        status, answer = cluster.api_request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                             body=json.dumps(review).encode(), timeout=10.0)
    except OSError:
        return False  # the API server not answering now: ask again
    return status == 201 and bool(json.loads(answer).get("status", {}).get("allowed"))

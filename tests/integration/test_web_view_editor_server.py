"""The editor's server side against the real API server, as the people who would try to get around it.

Each person runs their own `kubectl towline ui` (with `--allow-apply` where the test says so) and posts what
the editor's page posts, with the page's CSRF token: alice may author Workflows (towline-workflow-author) but
not read Secrets; bob may only read Workflows (towline-viewer); carol may list the namespace's Secrets. What
comes back is what the API server and the chart's admission policies decided, as that person.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import yaml
from tests.integration.helmsupport import render
from tests.integration.support import apply, bind_role, get, wait_for

from towline_dev.binaries import BinarySet
from towline_dev.browser import WebView, web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration]

WORKFLOWS = "workflows.towline.dev"
SECRET_VALUE = "https://hooks.slack.example/services/T000/B000/editor-secret-value"


def workflow(namespace: str, name: str = "deploy", *, secret: str | None = None, **metadata: Any) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"id": "call", "action": "http.request",
                                    "with": {"url": "https://api.example.com/deploy"}}]
    if secret is not None:
        steps.append({"id": "tell", "needs": ["call"], "action": "notify.slack", "credentials": {"slack": secret},
                      "with": {"text": "deployed"}})
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace, **metadata}, "spec": {"steps": steps}}


def with_managed_fields(cluster: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    """The Workflow as the API server keeps it, managedFields included (kubectl leaves them out unless asked)."""
    shown = cluster.kubectl("get", WORKFLOWS, name, "-n", namespace, "-o", "json", "--show-managed-fields")
    return dict(json.loads(shown.stdout))


def as_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)


@pytest.fixture
def editor_namespace(towline_installed: ControlPlane, namespace: str) -> str:
    cluster = towline_installed
    bind_role(cluster, namespace, "towline-workflow-author", users=("alice",))
    bind_role(cluster, namespace, "towline-viewer", users=("bob",))
    apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "secret-names", "namespace": namespace},
                    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]})
    apply(cluster, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "secret-names", "namespace": namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secret-names"},
                    "subjects": [{"kind": "User", "name": "carol", "apiGroup": "rbac.authorization.k8s.io"}]})
    cluster.kubectl("create", "secret", "generic", "x", "-n", namespace, f"--from-literal=url={SECRET_VALUE}")
    # Right after the CRDs are installed the API server answers 429 "storage is (re)initializing" for a while.
    wait_for("the API server serves Workflows", lambda: cluster.kubectl(
        "get", WORKFLOWS, "-n", namespace, check=False).returncode == 0)
    return namespace


class Editor:
    """One person's browser on their web view: the session cookie and the page's CSRF token."""

    def __init__(self, view: WebView, client: httpx.Client) -> None:
        self.view, self.client = view, client
        assert client.get(view.launch_url).status_code == 303
        page = client.get(view.url("/editor"))
        assert page.status_code == 200 and 'data-page="editor"' in page.text, page.text[:400]
        found = re.search(r'<meta name="towline-csrf" content="([^"]+)">', page.text)
        assert found, page.text[:400]
        self.token = found.group(1)

    def get(self, path: str) -> httpx.Response:
        return self.client.get(self.view.url(path))

    def post(self, path: str, body: Any, *, token: bool = True, **options: Any) -> httpx.Response:
        headers = {"Origin": self.view.base, **({"X-Towline-CSRF": self.token} if token else {})}
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.client.post(self.view.url(path), content=content,
                                headers={**headers, "Content-Type": "application/json"}, **options)


@contextmanager
def editor(cluster: ControlPlane, who: str, namespace: str, *options: str) -> Iterator[Editor]:
    with web_view(cluster.kubeconfig, context_name(who), namespace, *options) as view, \
            httpx.Client(timeout=60) as client:
        yield Editor(view, client)


def test_validate_puts_the_credentials_policys_refusal_on_the_step_and_creates_nothing(
    towline_installed: ControlPlane, editor_namespace: str,
) -> None:
    cluster, ns = towline_installed, editor_namespace
    with editor(cluster, "alice", ns) as alice:
        answer = alice.post("/api/editor/validate", {"yaml": as_yaml(workflow(ns, secret="x"))})
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert result["ok"] is False, result
        refused = [p for p in result["problems"] if p["path"] == "spec.steps[1].credentials.slack"]
        assert refused, result
        assert refused[0]["source"] == "admission" and "alice may not get Secret x" in refused[0]["message"], refused

        # Without the Secret the same Workflow passes both checks; an offline problem is named at its field.
        clean = alice.post("/api/editor/validate", {"yaml": as_yaml(workflow(ns))}).json()
        assert clean == {"ok": True, "problems": []}, clean
        broken = workflow(ns)
        broken["spec"]["steps"][0]["needs"] = ["nowhere"]
        offline = alice.post("/api/editor/validate", {"yaml": as_yaml(broken)}).json()
        assert offline["ok"] is False, offline
        assert any(p["source"] == "offline" and p["path"].startswith("spec.steps[0].needs")
                   for p in offline["problems"]), offline
    assert get(cluster, WORKFLOWS, "deploy", ns) is None, "validate is a dry run: nothing was created"


def test_apply_is_refused_while_allow_apply_is_off_and_nothing_changes(
    towline_installed: ControlPlane, editor_namespace: str,
) -> None:
    cluster, ns = towline_installed, editor_namespace
    with editor(cluster, "alice", ns) as alice:
        answer = alice.post("/api/editor/apply", {"yaml": as_yaml(workflow(ns))})
        assert answer.status_code == 403, answer.text
        assert "ui.editor.allowApply" in answer.json()["message"] and "--allow-apply" in answer.json()["message"]
        shown = alice.get("/api/editor/workflows/deploy")
        assert shown.status_code == 404, shown.text
    assert get(cluster, WORKFLOWS, "deploy", ns) is None


def test_apply_as_a_person_who_may_only_read_workflows_gets_the_api_servers_refusal(
    towline_installed: ControlPlane, editor_namespace: str,
) -> None:
    cluster, ns = towline_installed, editor_namespace
    apply(cluster, workflow(ns))
    before = get(cluster, WORKFLOWS, "deploy", ns)
    assert before is not None
    changed = workflow(ns)
    changed["spec"]["steps"][0]["with"]["url"] = "https://attacker.example/"
    with editor(cluster, "bob", ns, "--allow-apply") as bob:
        shown = bob.get("/api/editor/workflows/deploy").json()
        assert shown["canApply"] is False and shown["managedBy"] is None, shown
        answer = bob.post("/api/editor/apply", {"yaml": as_yaml(changed)})
        assert answer.status_code == 403, answer.text
        (refused,) = answer.json()["problems"]
        assert '"bob" cannot patch' in refused["message"] and "workflows" in refused["message"], refused
    after = get(cluster, WORKFLOWS, "deploy", ns)
    assert after is not None and after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"], "nothing was written"
    assert after["metadata"].get("labels") == before["metadata"].get("labels")


ARGO_CD = {"labels": {"app.kubernetes.io/instance": "team-apps"},
           "annotations": {"argocd.argoproj.io/tracking-id": "team-apps:towline.dev/Workflow:{ns}/{name}"}}
FLUX = {"labels": {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}}


@pytest.mark.parametrize(("marks", "tool"), [(ARGO_CD, "Argo CD"), (FLUX, "Flux")])
def test_apply_of_a_gitops_managed_workflow_is_refused_naming_the_tool(
    towline_installed: ControlPlane, editor_namespace: str, marks: dict[str, Any], tool: str,
) -> None:
    cluster, ns = towline_installed, editor_namespace
    metadata = json.loads(json.dumps(marks).replace("{ns}", ns).replace("{name}", "managed"))
    apply(cluster, workflow(ns, "managed", **metadata))
    before = get(cluster, WORKFLOWS, "managed", ns)
    assert before is not None
    edited = workflow(ns, "managed")  # the editor's YAML need not carry the tool's marks: the live object does
    edited["spec"]["steps"][0]["with"]["url"] = "https://api.example.com/other"
    with editor(cluster, "alice", ns, "--allow-apply") as alice:
        shown = alice.get("/api/editor/workflows/managed").json()
        assert shown["managedBy"] in ("argocd", "flux") and shown["canApply"] is False, shown
        answer = alice.post("/api/editor/apply", {"yaml": as_yaml(edited)})
        assert answer.status_code == 409, answer.text
        assert f"managed by {tool}" in answer.json()["message"], answer.text
    after = get(cluster, WORKFLOWS, "managed", ns)
    # The operator's status writes move the resourceVersion; what a person writes moves these.
    assert after is not None and after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["metadata"].get("labels") == before["metadata"].get("labels")


def test_every_editor_write_needs_the_pages_csrf_token(towline_installed: ControlPlane, editor_namespace: str) -> None:
    cluster, ns = towline_installed, editor_namespace
    body = {"yaml": as_yaml(workflow(ns)), "against": "live"}
    with editor(cluster, "alice", ns, "--allow-apply") as alice:
        for path in ("/api/editor/validate", "/api/editor/diff", "/api/editor/apply"):
            answer = alice.post(path, body, token=False)
            assert answer.status_code == 403 and "X-Towline-CSRF" in answer.text, (path, answer.text)
            other = alice.post(f"/ns/{ns}{path}", body, token=False)
            assert other.status_code == 403, (path, other.text)
    assert get(cluster, WORKFLOWS, "deploy", ns) is None


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        previous, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{','.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\n"


def test_an_oversized_body_and_a_yaml_bomb_are_refused(towline_installed: ControlPlane, editor_namespace: str) -> None:
    cluster, ns = towline_installed, editor_namespace
    with editor(cluster, "alice", ns, "--allow-apply") as alice:
        huge = json.dumps({"yaml": "a: " + "x" * (2 * 1024 * 1024)}).encode()
        for path in ("/api/editor/validate", "/api/editor/diff", "/api/editor/apply"):
            answer = alice.post(path, huge)
            assert answer.status_code == 413 and "1 MiB" in answer.json()["message"], (path, answer.text[:300])
        bomb = alice.post("/api/editor/validate", {"yaml": billion_laughs()}, timeout=30)
        assert bomb.status_code == 200, bomb.text
        (problem,) = bomb.json()["problems"]
        assert problem["source"] == "yaml" and "aliases" in problem["message"], problem
        applied = alice.post("/api/editor/apply", {"yaml": billion_laughs()}, timeout=30)
        assert applied.status_code == 400 and "aliases" in applied.text, applied.text
        # The server still answers at once after the bomb: nothing was left expanding.
        assert alice.get("/api/editor/examples").status_code == 200


def test_the_catalogue_lists_secret_names_only_and_none_for_who_may_not_list_them(
    towline_installed: ControlPlane, editor_namespace: str,
) -> None:
    cluster, ns = towline_installed, editor_namespace
    with editor(cluster, "carol", ns) as carol:
        answer = carol.get("/api/editor/catalog")
        assert answer.status_code == 200, answer.text
        catalog = answer.json()
        assert catalog["secrets"] == ["x"] and catalog["secretsListable"] is True, catalog["secrets"]
        assert SECRET_VALUE not in answer.text and "aHR0cHM6" not in answer.text, "no Secret data, plain or base64"
        assert {"http.request", "notify.slack"} <= {a["name"] for a in catalog["actions"]}
        slack = next(a for a in catalog["actions"] if a["name"] == "notify.slack")
        assert slack["credentials"] == ["slack"] and slack["schema"]["properties"]["text"], slack
        assert {"action", "stepType", "code", "approval", "wait"} <= set(catalog["kinds"])
        assert {"manual", "webhook", "cron", "cloudEvent"} <= set(catalog["triggers"])
    with editor(cluster, "alice", ns) as alice:
        catalog = alice.get("/api/editor/catalog").json()
        assert catalog["secrets"] == [] and catalog["secretsListable"] is False, catalog["secrets"]


def test_a_live_workflow_comes_as_yaml_without_managed_fields_or_status(
    towline_installed: ControlPlane, editor_namespace: str,
) -> None:
    cluster, ns = towline_installed, editor_namespace
    apply(cluster, workflow(ns, labels={"team": "a"}))
    cluster.kubectl("patch", WORKFLOWS, "deploy", "-n", ns, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"observedGeneration": 1,
                                           "lastRun": {"name": "deploy-status-marker", "phase": "Succeeded"}}}))
    live = with_managed_fields(cluster, "deploy", ns)
    assert live["metadata"].get("managedFields") and live["status"]["lastRun"]["name"] == "deploy-status-marker", live
    with editor(cluster, "alice", ns, "--allow-apply") as alice:
        shown = alice.get("/api/editor/workflows/deploy").json()
        text = shown["yaml"]
        for leaked in ("managedFields", "status", "deploy-status-marker", "uid", "resourceVersion",
                       "creationTimestamp", "generation", "last-applied-configuration"):
            assert leaked not in text, (leaked, text)
        assert yaml.safe_load(text) == {k: v for k, v in workflow(ns, labels={"team": "a"}).items()}, text
        assert shown["resourceVersion"] == live["metadata"]["resourceVersion"]
        assert shown["managedBy"] is None and shown["canApply"] is True, shown
        same = alice.post("/api/editor/diff", {"yaml": text, "against": "live"}).json()
        assert same == {"diff": "", "same": True}, same


def test_apply_as_a_person_allowed_to_writes_with_the_editors_field_manager(
    towline_installed: ControlPlane, editor_namespace: str,
) -> None:
    cluster, ns = towline_installed, editor_namespace
    document = workflow(ns)
    with editor(cluster, "alice", ns, "--allow-apply") as alice:
        created = alice.post("/api/editor/apply", {"yaml": as_yaml(document)})
        assert created.status_code == 200 and created.json()["applied"] is True, created.text
        edited = copy.deepcopy(document)
        edited["spec"]["steps"][0]["with"]["url"] = "https://api.example.com/v2/deploy"
        diff = alice.post("/api/editor/diff", {"yaml": as_yaml(edited), "against": "live"}).json()
        assert diff["same"] is False, diff
        assert re.search(r"^-\s+url: https://api.example.com/deploy$", diff["diff"], re.M), diff["diff"]
        assert re.search(r"^\+\s+url: https://api.example.com/v2/deploy$", diff["diff"], re.M), diff["diff"]
        stale = alice.post("/api/editor/apply", {"yaml": as_yaml(edited), "generation": 99})
        assert stale.status_code == 409 and "changed since" in stale.text, stale.text
        # The operator's status writes since the create do not make the editor's read stale: only a spec change.
        updated = alice.post("/api/editor/apply", {"yaml": as_yaml(edited),
                                                   "generation": created.json()["generation"]})
        assert updated.status_code == 200, updated.text
    live = with_managed_fields(cluster, "deploy", ns)
    assert live["spec"]["steps"][0]["with"]["url"] == "https://api.example.com/v2/deploy"
    managers = {(m["manager"], m["operation"]) for m in live["metadata"]["managedFields"]}
    assert ("towline-editor", "Apply") in managers, managers


def test_the_chart_lets_the_in_cluster_editor_apply_only_when_allow_apply_is_set(k8s_binaries: BinarySet) -> None:
    def arguments(*values: str) -> list[str]:
        documents = render(k8s_binaries, {
            "ui.enabled": "true", "ui.url": "https://towline.example.com", "ui.oidc.issuer": "https://idp.example.com",
            "ui.oidc.clientId": "towline-web", "ui.oidc.clientSecret.name": "ui-oidc",
        }, *values, "--show-only", "templates/ui.yaml")
        deployment = next(d for d in documents if d["kind"] == "Deployment")
        return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--allow-apply" not in arguments(), "off by default"
    assert "--allow-apply" not in arguments("--set", "ui.editor.allowApply=false")
    assert "--allow-apply" in arguments("--set", "ui.editor.allowApply=true")

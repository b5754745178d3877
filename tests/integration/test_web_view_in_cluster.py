"""The in-cluster web view (`towline ui`, the chart's ui.enabled) with a real OpenID Connect sign-in.

The chart's own ui.yaml, rendered by helm and applied into the test's namespace, runs the towline image as a pod
on the real node, with no ServiceAccount token. The browser (headless Chromium) reaches it through a port-forward
on 127.0.0.1, signs in at the tests' provider (ORY Hydra and its login form, towline_dev.idp) and is sent back to
the page it asked for; the pod trades the code at Hydra and calls the API server with the person's ID token,
which the API server trusts (oidc:bob, oidc:carol, ...). Nothing here stands in for the provider, the API server
or the admission policies: bob's approval records decidedBy oidc:bob because the API server said so, and
carol's refusal is the admission policy's own message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from tests.integration.incluster_view_support import (
    HOOKS,
    SERVICE_ACCOUNT,
    SESSION_COOKIE,
    InClusterView,
    gated_run,
    notification_link,
    page_text,
    press_approve,
    refusal_in,
    screenshot,
    serving_view,
    session_cookie,
    sign_in_from,
    started_run,
)
from tests.integration.oidcsupport import ALICE, BOB, CAROL, DAVE
from tests.integration.support import get, wait_for

from towline_dev.browser import headless_chromium
from towline_dev.controlplane import ControlPlane
from towline_dev.idp.flow import sign_in
from towline_dev.idp.provider import IdentityProvider
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def in_cluster_view(
    towline_installed: ControlPlane, real_node_with_images: Any, identity_provider: IdentityProvider,
) -> Iterator[InClusterView]:
    with serving_view(towline_installed, identity_provider, "web-sso", ("--set", f"ui.webhookUrl={HOOKS}")) as view:
        yield view


def test_bob_approves_after_signing_in_from_the_link_and_carol_sees_the_four_eyes_refusal(
    towline_operator: OperatorProcess, in_cluster_view: InClusterView, tmp_path: Path,
) -> None:
    view = in_cluster_view
    client = view.provider.register_client([f"{view.url}/auth/callback"])
    carol_token = sign_in(view.provider, client, "carol").id_token
    run, approval = gated_run(view, carol_token)
    link = notification_link(view, run, approval)
    assert link == view.link(f"/approvals/{approval}")
    arguments = view.provider.chromium_arguments()

    with headless_chromium(print, arguments=arguments) as carol:
        sign_in_from(carol, view, "carol", link)
        assert f"{CAROL} · namespace {view.namespace}" in carol.find_element(By.CSS_SELECTOR, ".who").text
        answer = refusal_in(press_approve(carol, approval))
        assert f"four-eyes approval: {CAROL} started this run and cannot approve it" in answer.text
        screenshot(carol, "web-view-in-cluster-four-eyes.png", tmp_path)

    with headless_chromium(print, arguments=arguments) as bob:
        sign_in_from(bob, view, "bob", link)
        screenshot(bob, "web-view-in-cluster-approval.png", tmp_path)
        press_approve(bob, approval)
        # Decided, the card leaves the waiting list and the decision shows in the decided table, with who.
        wait_for("the decided row naming bob", lambda: bob.execute_script(
            "const row = document.querySelector(arguments[0]); return row ? row.innerText : ''",
            f'tr[data-approval="{approval}"]'), 60, explain=lambda: page_text(bob))
        shown = bob.execute_script("return document.querySelector(arguments[0]).innerText",
                                   f'tr[data-approval="{approval}"]')
        assert BOB in shown and "Approved" in shown, shown
    decided = get(view.cluster, "approvals.towline.dev", approval, view.namespace)
    assert decided is not None and decided["spec"]["decidedBy"] == BOB and decided["spec"]["decision"] == "Approved"
    assert run


def test_dave_signed_in_sees_no_runs_and_the_api_servers_refusal(
    towline_operator: OperatorProcess, in_cluster_view: InClusterView,
) -> None:
    view = in_cluster_view
    # A run is there (carol's), so "no runs" is what dave may see, not what the namespace holds.
    client = view.provider.register_client([f"{view.url}/auth/callback"])
    run = started_run(view, sign_in(view.provider, client, "carol").id_token)
    assert get(view.cluster, "workflowruns.towline.dev", run, view.namespace) is not None
    with headless_chromium(print, arguments=view.provider.chromium_arguments()) as dave:
        sign_in_from(dave, view, "dave", view.link("/runs"))
        refusal = wait_for("the refusal", lambda: dave.find_elements(By.CSS_SELECTOR, "p.result.refused"), 60)[0]
        assert "403" in refusal.text and DAVE in refusal.text
        assert dave.find_elements(By.CSS_SELECTOR, "tr[data-run]") == []
        assert run not in page_text(dave)
        # Nor in the view's every-namespace list, the cluster-wide one or namespace by namespace.
        dave.get(f"{view.url}/all/runs")
        wait_for("the every-namespace page", lambda: dave.find_elements(By.CSS_SELECTOR, "#runs"), 60,
                 explain=lambda: page_text(dave))
        assert dave.find_elements(By.CSS_SELECTOR, "#runs tbody tr") == [], page_text(dave)


def test_a_stolen_session_cookie_stops_working_after_sign_out(in_cluster_view: InClusterView) -> None:
    view = in_cluster_view
    with headless_chromium(print, arguments=view.provider.chromium_arguments()) as bob:
        sign_in_from(bob, view, "bob", view.link("/workflows"))
        stolen = session_cookie(bob)
        # The cookie as the browser keeps it: HttpOnly (the page's script never sees it), Secure, SameSite=Lax,
        # host-only on Path=/ (the __Host- prefix), and it holds the session's id only.
        (kept,) = (c for c in bob.get_cookies() if c["name"] == SESSION_COOKIE)
        assert (kept["httpOnly"], kept["secure"], kept["sameSite"], kept["path"]) == (True, True, "Lax", "/"), kept
        assert SESSION_COOKIE not in str(bob.execute_script("return document.cookie"))
        assert len(stolen) == 43 and "." not in stolen, "256 random bits, no token"
        assert httpx.get(view.link("/api/workflows"), headers={"Cookie": f"{SESSION_COOKIE}={stolen}"}).status_code \
            == 200, "the copy works while bob is signed in"
        bob.find_element(By.ID, "sign-out").click()
        wait_for("the signed-out page", lambda: "Signed out" in page_text(bob), 30)
    after = httpx.get(view.link("/api/workflows"), headers={"Cookie": f"{SESSION_COOKIE}={stolen}"})
    assert after.status_code == 401


def test_cross_site_writes_and_forged_identity_headers_change_nothing(
    towline_operator: OperatorProcess, in_cluster_view: InClusterView,
) -> None:
    view = in_cluster_view
    client = view.provider.register_client([f"{view.url}/auth/callback"])
    carol_token = sign_in(view.provider, client, "carol").id_token
    bob_token = sign_in(view.provider, client, "bob").id_token
    _, approval = gated_run(view, carol_token)
    arguments = view.provider.chromium_arguments()
    with headless_chromium(print, arguments=arguments) as bob, headless_chromium(print, arguments=arguments) as carol:
        sign_in_from(bob, view, "bob", view.link("/approvals"))
        sign_in_from(carol, view, "carol", view.link("/approvals"))
        bobs = {"Cookie": f"{SESSION_COOKIE}={session_cookie(bob)}"}
        carols = {"Cookie": f"{SESSION_COOKIE}={session_cookie(carol)}"}
        carols_csrf = carol.find_element(By.CSS_SELECTOR, 'meta[name="towline-csrf"]').get_attribute("content")
    url = view.link(f"/api/approvals/{approval}")
    body = json.dumps({"decision": "Approved"})
    # Another site's page in bob's browser posts with his cookie: its own Origin, no CSRF token (it cannot read
    # the view's page). Bob may approve this gate, so only the view's checks stand in the way.
    cross_site = httpx.post(url, content=body, headers={
        **bobs, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert cross_site.status_code == 403
    no_token = httpx.post(url, content=body, headers={**bobs, "Origin": view.url})
    assert no_token.status_code == 403 and "X-Towline-CSRF" in no_token.text
    # Headers that would name bob, sent with carol's session and token: the API server still sees carol.
    forged = {"X-Forwarded-User": BOB, "X-Remote-User": BOB, "X-Forwarded-Email": "bob@example.test",
              "Remote-User": BOB, "Impersonate-User": BOB, "Authorization": f"Bearer {bob_token}"}
    as_carol = httpx.post(url, content=body, headers={
        **forged, **carols, "Origin": view.url, "X-Towline-CSRF": carols_csrf})
    assert as_carol.status_code == 403 and f"{CAROL} started this run" in as_carol.json()["message"]
    # Without a session, the headers alone sign nobody in.
    alone = httpx.post(url, content=body, headers={**forged, "Origin": view.url})
    assert alone.status_code == 401
    listed = httpx.get(view.link("/api/workflows"), headers=forged)
    assert listed.status_code == 401
    still = get(view.cluster, "approvals.towline.dev", approval, view.namespace)
    assert still is not None and not still["spec"].get("decision"), "nothing was decided"


def test_the_ui_service_account_alone_lists_no_run_and_approves_nothing(
    towline_operator: OperatorProcess, in_cluster_view: InClusterView,
) -> None:
    view = in_cluster_view
    cluster, namespace = view.cluster, view.namespace
    # A run waits at a gate: there is a run to list and an approval to decide.
    client = view.provider.register_client([f"{view.url}/auth/callback"])
    run, approval = gated_run(view, sign_in(view.provider, client, "carol").id_token)
    account = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    listed = cluster.kubectl("--as", account, "-n", namespace, "get", "workflowruns", check=False)
    assert listed.returncode != 0 and "forbidden" in listed.stderr.lower() and run not in listed.stdout
    everywhere = cluster.kubectl("--as", account, "get", "workflowruns", "--all-namespaces", check=False)
    assert everywhere.returncode != 0 and "forbidden" in everywhere.stderr.lower()
    patch = cluster.kubectl("--as", account, "-n", namespace, "patch", "approval", approval, "--type",
                            "merge", "-p", json.dumps({"spec": {"decision": "Approved", "decidedBy": account}}),
                            check=False)
    assert patch.returncode != 0 and "forbidden" in patch.stderr.lower()
    still = get(cluster, "approvals.towline.dev", approval, namespace)
    assert still is not None and not still["spec"].get("decision"), "nothing was decided"
    secrets = cluster.kubectl("--as", account, "-n", namespace, "get", "secrets", check=False)
    assert secrets.returncode != 0 and "forbidden" in secrets.stderr.lower()
    # And the pod holds no token of it to use: nothing is mounted at the ServiceAccount's path.
    pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=ui",
                                      "-o", "json").stdout)["items"]
    assert pods and all(p["spec"].get("automountServiceAccountToken") is False for p in pods)
    mounts = [m["mountPath"] for p in pods for c in p["spec"]["containers"] for m in c.get("volumeMounts", [])]
    assert not any(path.startswith("/var/run/secrets/kubernetes.io") for path in mounts), mounts


def test_a_stolen_session_cookie_stops_working_when_the_session_expires(
    towline_installed: ControlPlane, real_node_with_images: Any, identity_provider: IdentityProvider,
) -> None:
    # A view whose sessions last 18 s from sign-in (ui.session.absoluteHours), however busy they are.
    short = ("--set-json", "ui.session.absoluteHours=0.005")
    with serving_view(towline_installed, identity_provider, "web-sso-expiry", short) as view, \
            headless_chromium(print, arguments=view.provider.chromium_arguments()) as bob:
        sign_in_from(bob, view, "bob", view.link("/workflows"))
        stolen = {"Cookie": f"{SESSION_COOKIE}={session_cookie(bob)}"}
        assert httpx.get(view.link("/api/workflows"), headers=stolen).status_code == 200
        # Used all along (so never idle), the copy still stops at the absolute limit.
        wait_for("the copied cookie refused", lambda: httpx.get(view.link("/api/workflows"), headers=stolen)
                 .status_code == 401, 90, interval=1.0)
        bob.get(view.link("/workflows"))
        wait_for("bob's browser sent to sign in again", lambda: bob.find_elements(By.ID, "username"), 60)


def test_a_stolen_session_cookie_stops_working_once_the_session_sat_idle(
    towline_installed: ControlPlane, real_node_with_images: Any, identity_provider: IdentityProvider,
) -> None:
    # A view whose sessions end after 15 s without a request (ui.session.idleMinutes).
    short = ("--set-json", "ui.session.idleMinutes=0.25")
    with serving_view(towline_installed, identity_provider, "web-sso-idle", short) as view:
        with headless_chromium(print, arguments=view.provider.chromium_arguments()) as bob:
            sign_in_from(bob, view, "bob", view.link("/workflows"))
            stolen = {"Cookie": f"{SESSION_COOKIE}={session_cookie(bob)}"}
        # bob closed his browser. A live stream opened with the copy is no request after its first: it ends when
        # the session has sat idle, which is the fact this waits for (a read timeout fails the test instead).
        with httpx.Client(timeout=httpx.Timeout(90.0)) as http, \
                http.stream("GET", view.link("/events/approvals"), headers=stolen) as stream:
            # On a loaded machine the browser may take the whole idle time to close: then the stream is refused.
            if stream.status_code != 401:
                lines = stream.iter_lines()
                assert next(line for line in lines if line.startswith("event: ")) == "event: snapshot"
                try:
                    for _ in lines:
                        pass
                except (httpx.RemoteProtocolError, httpx.ReadError):
                    pass
        answer = httpx.get(view.link("/api/workflows"), headers=stolen)
        assert answer.status_code == 401, answer.text


def test_a_stream_open_on_a_copied_cookie_ends_when_the_session_does(in_cluster_view: InClusterView) -> None:
    view = in_cluster_view
    with headless_chromium(print, arguments=view.provider.chromium_arguments()) as bob:
        sign_in_from(bob, view, "bob", view.link("/approvals"))
        stolen = {"Cookie": f"{SESSION_COOKIE}={session_cookie(bob)}"}
        csrf = bob.find_element(By.CSS_SELECTOR, 'meta[name="towline-csrf"]').get_attribute("content")
    # Read timeout 60 s: a stream the view leaves open fails the test by timing out; ending it is the fact awaited.
    with httpx.Client(timeout=httpx.Timeout(60.0)) as http, \
            http.stream("GET", view.link("/events/approvals"), headers=stolen) as stream:
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("event: ")) == "event: snapshot"
        out = http.post(f"{view.url}/auth/signout", headers={**stolen, "Origin": view.url, "X-Towline-CSRF": csrf})
        assert out.status_code == 200
        try:
            for _ in lines:
                pass
        except (httpx.RemoteProtocolError, httpx.ReadError):
            pass  # the view cut the stream: what this waits for


def test_alice_signed_in_starts_a_run_from_the_params_form_recorded_as_requested_by_her(
    towline_operator: OperatorProcess, in_cluster_view: InClusterView,
) -> None:
    """The start form in the cluster: the run is created with alice's ID token, so admission records
    requestedBy oidc:alice (as the API server saw her); a bad param is named at its field and creates nothing."""
    view = in_cluster_view
    cluster, namespace = view.cluster, view.namespace
    workflow = {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "rotate-keys", "namespace": namespace},
        "spec": {
            "params": [{"name": "region", "type": "string", "required": True},
                       {"name": "days", "type": "integer", "default": 7}],
            "steps": [{"id": "plan", "action": "data.transform",
                       "with": {"data": {}, "fields": {"ok": "true"}}}],
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(workflow))
    wait_for("the Workflow Ready", lambda: any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in ((get(cluster, "workflows.towline.dev", "rotate-keys", namespace) or {}).get("status") or {})
        .get("conditions", [])), 60)

    def runs() -> list[dict[str, Any]]:
        listed = json.loads(cluster.kubectl("-n", namespace, "get", "workflowruns.towline.dev", "-o", "json").stdout)
        return [r for r in listed["items"] if r["spec"]["workflowRef"]["name"] == "rotate-keys"]

    with headless_chromium(print, arguments=view.provider.chromium_arguments()) as alice:
        sign_in_from(alice, view, "alice", view.link("/workflows/rotate-keys/start"))
        days = wait_for("the days field", lambda: alice.find_elements(By.CSS_SELECTOR, "#param-days"), 60)[0]
        days.clear()
        days.send_keys("soon")
        alice.find_element(By.CSS_SELECTOR, "#start-run").click()
        # The form says "checking…" until the view's answer arrives: wait for the answer, not the first text.
        refused = wait_for("the refused form", lambda: (
            text := alice.find_element(By.CSS_SELECTOR, "#start-result").text) != "checking…" and text, 60,
            explain=lambda: page_text(alice))
        assert "nothing was created" in refused, refused
        assert runs() == [], "a refused form creates no run"
        alice.find_element(By.CSS_SELECTOR, "#param-region").send_keys("emea")
        days.clear()
        days.send_keys("3")
        alice.find_element(By.CSS_SELECTOR, "#start-run").click()
        started = wait_for("the started run", lambda: "requested by" in (
            text := alice.find_element(By.CSS_SELECTOR, "#start-result").text) and text, 60,
            explain=lambda: page_text(alice))
        assert f"requested by {ALICE}" in started, started
    (run,) = runs()
    assert run["spec"]["requestedBy"] == ALICE, run["spec"]
    assert run["spec"]["params"] == {"region": "emea", "days": 3}, run["spec"]


def test_alice_signed_in_sees_a_workflows_graph_params_webhook_url_and_next_schedule(
    towline_operator: OperatorProcess, in_cluster_view: InClusterView,
) -> None:
    """The workflow page in the cluster, read with alice's ID token: its steps as a graph, its params, each
    webhook's URL at ui.webhookUrl and the schedule's next slot as the operator wrote it."""
    view = in_cluster_view
    cluster, namespace = view.cluster, view.namespace
    cluster.kubectl("-n", namespace, "create", "secret", "generic", "push-hook", "--from-literal=secret=whsec_dGVzdA==")
    workflow = {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "nightly-sync", "namespace": namespace},
        "spec": {
            "params": [{"name": "region", "type": "string", "required": True},
                       {"name": "days", "type": "integer", "default": 7}],
            "triggers": [
                {"name": "nightly", "schedule": {"cron": "0 2 * * *", "timeZone": "Europe/Berlin"}},
                {"name": "on_push", "webhook": {"verify": {"scheme": "standard-webhooks",
                                                           "secretRef": {"name": "push-hook", "key": "secret"}}}},
            ],
            "steps": [{"id": "plan", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}},
                      {"id": "apply", "needs": ["plan"], "action": "data.transform",
                       "with": {"data": {}, "fields": {"ok": "true"}}}],
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(workflow))
    next_slot = wait_for("the operator's next slot of the schedule", lambda: (
        (get(cluster, "workflows.towline.dev", "nightly-sync", namespace) or {}).get("status") or {}).get(
        "nextScheduleTime"), 60)
    with headless_chromium(print, arguments=view.provider.chromium_arguments()) as alice:
        sign_in_from(alice, view, "alice", view.link("/workflows/nightly-sync"))
        hook = wait_for("the webhook trigger's row", lambda: alice.find_elements(
            By.CSS_SELECTOR, '#triggers tr[data-trigger="on_push"]'), 60, explain=lambda: page_text(alice))[0]
        assert f"POST {HOOKS}/hooks/{namespace}/nightly-sync/on_push" in hook.text, hook.text
        nightly = alice.find_element(By.CSS_SELECTOR, '#triggers tr[data-trigger="nightly"]').text
        assert "0 2 * * *" in nightly and f"next {next_slot}" in nightly, nightly
        assert f"Next schedule\n{next_slot}" in alice.find_element(By.CSS_SELECTOR, "dl.facts").text
        assert "(required)" in alice.find_element(By.CSS_SELECTOR, '#params tr[data-param="region"]').text
        assert {n.get_attribute("data-step") for n in alice.find_elements(By.CSS_SELECTOR, "#graph g.node")} == \
            {"plan", "apply"}


def test_bob_who_may_list_namespaces_switches_among_them_and_sees_runs_only_where_he_may_list_them(
    towline_operator: OperatorProcess, in_cluster_view: InClusterView,
) -> None:
    """The namespace switcher and the every-namespace page for someone who may list namespaces: every namespace
    is offered, the page lists runs of the namespaces whose runs he may list and names each other one with the
    API server's refusal (dave's test has the one who may list neither)."""
    view = in_cluster_view
    cluster = view.cluster
    client = view.provider.register_client([f"{view.url}/auth/callback"])
    run = started_run(view, sign_in(view.provider, client, "carol").id_token)
    role = f"{view.namespace}-namespace-lister"
    cluster.kubectl("create", "clusterrole", role, "--verb=get,list", "--resource=namespaces")
    try:
        cluster.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}", f"--user={BOB}")
        with headless_chromium(print, arguments=view.provider.chromium_arguments()) as bob:
            sign_in_from(bob, view, "bob", view.link("/runs"))
            switcher = wait_for("the namespace switcher", lambda: bob.find_elements(By.ID, "namespace"), 60,
                                explain=lambda: page_text(bob))[0]
            offered = {o.get_attribute("value") for o in switcher.find_elements(By.TAG_NAME, "option")}
            assert {view.namespace, "kube-system", "default"} <= offered, offered
            bob.get(f"{view.url}/all/runs")
            wait_for("carol's run on the every-namespace page", lambda: bob.find_elements(
                By.CSS_SELECTOR, f'#runs tr[data-run="{run}"][data-namespace="{view.namespace}"]'), 60,
                explain=lambda: page_text(bob))
            shown = {r.get_attribute("data-namespace") for r in bob.find_elements(By.CSS_SELECTOR, "#runs tbody tr")}
            # Another test's namespace that grants bob (the suite runs them side by side) may show too: each
            # namespace shown is one whose runs RBAC lets him list.
            for other in shown - {view.namespace}:
                assert cluster.kubectl("auth", "can-i", "list", "workflowruns.towline.dev", "-n", other, "--as", BOB,
                                       check=False).stdout.strip() == "yes", other
            refusal = bob.find_element(By.CSS_SELECTOR, 'p[data-refused="kube-system"]').text
            assert BOB in refusal and "forbidden" in refusal, refusal
    finally:
        cluster.kubectl("delete", "clusterrolebinding", role, "--ignore-not-found")
        cluster.kubectl("delete", "clusterrole", role, "--ignore-not-found")

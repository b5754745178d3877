"""The chart's in-cluster web view (`ui.enabled`): what reaches its pod (issuer, client, scopes, the client secret
from a Secret, session limits), how browsers reach it (an optional Ingress or Gateway API HTTPRoute routing / to
its Service, as the webhook ingress's exposure does /hooks/), and that the operator learns `ui.url` so approval
notifications carry the approval's link. A value that cannot work is refused naming it.

Rendered with the pinned helm (`helm template`); nothing here needs a cluster. The view running from this
template, signed in through a real provider, is test_web_view_in_cluster.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.helmsupport import find, render, template

from towline_dev.binaries import BinarySet

pytestmark = pytest.mark.integration

UI = {"ui.enabled": "true", "ui.url": "https://towline.example.com", "ui.oidc.issuer": "https://sso.example.com",
      "ui.oidc.clientId": "towline-web", "ui.oidc.clientSecret.name": "towline-ui-oidc"}
"""The least that turns the in-cluster web view on (docs/web-view.md, "Setting it up")."""


def ui_container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = find(documents, "Deployment", "towline-ui")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def operator_env(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = find(documents, "Deployment", "towline-operator")["spec"]["template"]["spec"]["containers"]
    return {entry["name"]: entry.get("value") for entry in container.get("env") or []}


def test_issuer_client_scopes_and_session_limits_reach_the_view_and_its_secret_comes_from_a_secret(
    k8s_binaries: BinarySet,
) -> None:
    documents = render(k8s_binaries, {**UI, "ui.oidc.scopes": '["openid", "email", "groups"]',
                                      "ui.oidc.clientSecret.key": "secret", "ui.session.idleMinutes": "15",
                                      "ui.session.absoluteHours": "4"})
    container = ui_container(documents)
    assert container["command"] == ["towline", "ui"]
    args = container["args"]
    for expected in ("--url=https://towline.example.com", "--issuer=https://sso.example.com",
                     "--client-id=towline-web", "--scopes=openid email groups", "--idle-minutes=15",
                     "--absolute-hours=4", "--client-secret-file=/var/run/towline/oidc/client-secret"):
        assert expected in args, (expected, args)
    assert not any("secret=" in arg.lower() and "file" not in arg for arg in args), "no secret on the command line"
    volumes = {v["name"]: v for v in find(documents, "Deployment", "towline-ui")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["oidc-client"]["secret"] == {"secretName": "towline-ui-oidc",
                                                "items": [{"key": "secret", "path": "client-secret"}]}


def test_the_view_finds_the_events_sinks_dead_letters_in_the_releases_namespace(k8s_binaries: BinarySet) -> None:
    """The operator runs in the release's namespace, and its sink keeps its dead letters there."""
    args = ui_container(render(k8s_binaries, UI, namespace="towline"))["args"]
    assert "--operator-namespace=towline" in args, args


def test_without_exposure_the_view_is_a_cluster_ip_service_only(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, UI)
    assert find(documents, "Service", "towline-ui")["spec"]["type"] == "ClusterIP"
    assert not [d for d in documents if d["kind"] in ("Ingress", "HTTPRoute") and d["metadata"]["name"] == "towline-ui"]


def test_the_view_is_exposed_by_an_ingress_on_its_host_routing_every_path_to_its_service(
    k8s_binaries: BinarySet,
) -> None:
    ingress = find(render(k8s_binaries, {
        **UI, "ui.expose.ingress.enabled": "true", "ui.expose.ingress.host": "towline.example.com",
        "ui.expose.ingress.className": "nginx", "ui.expose.ingress.tls.secretName": "towline-ui-tls",
        "ui.expose.ingress.annotations": '{"cert-manager.io/cluster-issuer": "letsencrypt"}',
    }), "Ingress", "towline-ui")
    assert ingress["metadata"]["namespace"] == "towline-system"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["towline.example.com"], "secretName": "towline-ui-tls"}]
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "towline.example.com"
    (path,) = rule["http"]["paths"]
    # The whole site (pages, /auth/callback, /ns/<namespace>/... deep links), not a prefix of it.
    assert (path["path"], path["pathType"], path["backend"]["service"]) == (
        "/", "Prefix", {"name": "towline-ui", "port": {"name": "http"}})


def test_the_view_is_exposed_by_an_http_route_on_its_gateway(k8s_binaries: BinarySet) -> None:
    route = find(render(k8s_binaries, {
        **UI, "ui.expose.httpRoute.enabled": "true", "ui.expose.httpRoute.hostnames": '["towline.example.com"]',
        "ui.expose.httpRoute.parentRefs": '[{"name": "public", "namespace": "gateways", "sectionName": "https"}]',
    }), "HTTPRoute", "towline-ui")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "gateways", "sectionName": "https"}]
    assert route["spec"]["hostnames"] == ["towline.example.com"]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["backendRefs"] == [{"name": "towline-ui", "port": 80}]


def test_the_operator_links_notifications_to_ui_url(k8s_binaries: BinarySet) -> None:
    assert operator_env(render(k8s_binaries, UI))["TOWLINE_UI_URL"] == "https://towline.example.com"
    # A view served elsewhere: the link without the chart's view.
    assert operator_env(render(k8s_binaries, {"ui.url": "https://approvals.example.com"}))["TOWLINE_UI_URL"] == \
        "https://approvals.example.com"
    assert not operator_env(render(k8s_binaries)).get("TOWLINE_UI_URL"), "no ui.url: no link"


def webhook_url_arg(documents: list[dict[str, Any]]) -> str | None:
    return next((arg.split("=", 1)[1] for arg in ui_container(documents)["args"]
                 if arg.startswith("--webhook-url=")), None)


def test_the_workflow_pages_webhook_urls_are_at_the_webhook_ingresss_public_host(k8s_binaries: BinarySet) -> None:
    assert webhook_url_arg(render(k8s_binaries, UI)) is None, "not exposed: the page shows the path only"
    exposed = {"ingress.expose.ingress.enabled": "true", "ingress.expose.ingress.host": "hooks.example.com"}
    assert webhook_url_arg(render(k8s_binaries, {**UI, **exposed})) == "https://hooks.example.com"
    routed = {"ingress.expose.httpRoute.enabled": "true", "ingress.expose.httpRoute.hostnames": '["in.example.com"]',
              "ingress.expose.httpRoute.parentRefs": '[{"name": "public"}]'}
    assert webhook_url_arg(render(k8s_binaries, {**UI, **routed})) == "https://in.example.com"
    # Behind something the chart does not make (a CDN, another controller): said outright.
    told = {**exposed, "ui.webhookUrl": "https://events.example.com"}
    assert webhook_url_arg(render(k8s_binaries, {**UI, **told})) == "https://events.example.com"


@pytest.mark.parametrize(("values", "named"), [
    ({"ui.webhookUrl": "https://hooks.example.com/hooks/"}, "webhookUrl"),
    ({"ui.expose.ingress.enabled": "true"}, "host"),
    ({"ui.expose.ingress.enabled": "true", "ui.expose.ingress.host": "Towline_Example"}, "host"),
    ({"ui.expose.httpRoute.enabled": "true"}, "parentRefs"),
    ({"ui.url": ""}, "ui.url"),
    ({"ui.oidc.issuer": ""}, "ui.oidc.issuer"),
    ({"ui.oidc.clientId": ""}, "ui.oidc.clientId"),
    ({"ui.oidc.clientSecret.name": ""}, "ui.oidc.clientSecret.name"),
])
def test_a_value_that_cannot_work_is_refused_naming_it(
    k8s_binaries: BinarySet, values: dict[str, str], named: str,
) -> None:
    emptied = [arg for key, value in values.items() if value == "" for arg in ("--set-json", f'{key}=""')]
    result = template(k8s_binaries, {**{k: v for k, v in UI.items() if k not in values},
                                     **{k: v for k, v in values.items() if v}}, *emptied)
    assert result.returncode != 0, f"rendered with {values}"
    assert named in result.stderr, result.stderr

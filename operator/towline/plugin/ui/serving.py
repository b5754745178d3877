"""`towline ui`: the web view served in the cluster, behind OpenID Connect sign-in (the chart's `ui.enabled`).

The same application as `kubectl towline ui` (towline.plugin.ui.server), behind the sign-in door
(towline.plugin.ui.signin) instead of the launch code. It holds no Kubernetes credential: its client to the API
server is built from the API server's address and CA alone (the pod mounts no ServiceAccount token), and every
call carries the signed-in person's ID token. What it keeps is in memory: a restart signs everyone out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from towline.k8s.client import KubeApi
from towline.plugin.ui.oidc import Provider, ProviderSettings
from towline.plugin.ui.server import SETTINGS, build_app_behind
from towline.plugin.ui.sessions import PendingLogins, SessionStore
from towline.plugin.ui.signin import CALLBACK_PATH, SIGNOUT_PATH, SignInDoor, Site

log = logging.getLogger(__name__)

DEFAULT_API_CA = "/var/run/towline/kube-root-ca/ca.crt"
"""The cluster's CA (the kube-root-ca.crt ConfigMap every namespace has), mounted without any token."""
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class SettingsError(ValueError):
    """A setting of `towline ui` that cannot work; the message names the value (and the chart's key) and the fix."""


@dataclass(frozen=True)
class ServeSettings:
    url: str
    """`ui.url`: where people reach the view; the redirect URI is this plus /auth/callback."""
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...]
    default_namespace: str
    api_server: str
    api_ca_file: str
    operator_namespace: str = "towline-system"
    """`--operator-namespace` (the chart: its release namespace): where the events sink keeps its dead letters."""
    provider_ca_file: str | None = None
    idle_seconds: float = 30 * 60.0
    absolute_seconds: float = 8 * 3600.0
    allow_apply: bool = False
    """`ui.editor.allowApply`: the editor may apply Workflows as the signed-in person."""
    webhook_url: str | None = None
    """`ui.webhookUrl`: the webhook ingress's public origin; the workflow page shows each webhook's URL there."""


def check_settings(settings: ServeSettings) -> None:
    """Refuse settings that would leak or cannot sign anyone in, naming the value and the fix."""
    url = urlsplit(settings.url)
    if url.scheme != "https" and not (url.scheme == "http" and url.hostname in {"localhost", "127.0.0.1"}):
        raise SettingsError(f"ui.url {settings.url!r} must be https:// (the session cookie is Secure; plain http "
                              "is accepted only for localhost)")
    if url.path not in {"", "/"} or url.query or url.fragment:
        raise SettingsError(f"ui.url {settings.url!r} must be an origin only, like https://towline.example.com: "
                              "the view is served at the root of its host")
    issuer = urlsplit(settings.issuer)
    if issuer.scheme != "https" and not (issuer.scheme == "http" and issuer.hostname in {"localhost", "127.0.0.1"}):
        raise SettingsError(f"ui.oidc.issuer {settings.issuer!r} must be an https:// URL (the API server accepts "
                              "only https issuers)")
    if not settings.client_id:
        raise SettingsError("ui.oidc.clientId is empty: set it to the client id registered at the provider")
    if not settings.client_secret:
        raise SettingsError("the client secret is empty: set ui.oidc.clientSecret.name/key to a Secret that "
                              "holds it")
    if settings.webhook_url is not None:
        hooks = urlsplit(settings.webhook_url)
        if hooks.scheme not in {"http", "https"} or not hooks.netloc or hooks.path not in {"", "/"} or hooks.query \
                or hooks.fragment:
            raise SettingsError(f"ui.webhookUrl {settings.webhook_url!r} must be the webhook ingress's origin as "
                                "senders reach it, like https://hooks.example.com (no path), or empty")
    if not _NAMESPACE.fullmatch(settings.operator_namespace):
        raise SettingsError(f"--operator-namespace {settings.operator_namespace!r} is not a namespace name (lowercase "
                            "letters, digits and '-', at most 63): give the namespace Towline's operator runs in")
    if "openid" not in settings.scopes:
        raise SettingsError(f"ui.oidc.scopes {' '.join(settings.scopes)!r} must include openid")


def redirect_uri(settings: ServeSettings) -> str:
    return settings.url.rstrip("/") + CALLBACK_PATH


def read_secret_file(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as error:
        raise SettingsError(f"--client-secret-file {path}: {error.strerror}; mount the Secret named by "
                              "ui.oidc.clientSecret there") from error


def in_cluster_api_server() -> str:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise SettingsError("no --api-server and no KUBERNETES_SERVICE_HOST: run in a pod or pass --api-server")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def build(settings: ServeSettings, http: aiohttp.ClientSession) -> web.Application:
    """The in-cluster application: the web view behind the sign-in door."""
    check_settings(settings)
    provider = Provider(ProviderSettings(issuer=settings.issuer, client_id=settings.client_id,
                                         client_secret=settings.client_secret, redirect_uri=redirect_uri(settings),
                                         scopes=settings.scopes), http)
    door = SignInDoor(
        site=Site(public_url=settings.url, default_namespace=settings.default_namespace), provider=provider,
        sessions=SessionStore(time.time, idle_seconds=settings.idle_seconds,
                              absolute_seconds=settings.absolute_seconds),
        logins=PendingLogins(time.time),
        base_api=KubeApi.without_credentials(settings.api_server, settings.api_ca_file))
    app = build_app_behind(door, signout=SIGNOUT_PATH, allow_apply=settings.allow_apply,
                           operator_namespace=settings.operator_namespace)
    app[SETTINGS]["webhookUrl"] = settings.webhook_url
    door.add_routes(app)
    return app


async def serve(settings: ServeSettings, host: str, port: int) -> int:
    """Serve until cancelled."""
    context = ssl.create_default_context(cafile=settings.provider_ca_file)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
        app = build(settings, http)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        log.info("the web view serves %s on %s:%d; sign-in at %s", settings.url, host, port, settings.issuer)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
    return 0

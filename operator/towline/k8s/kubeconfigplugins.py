"""A kubeconfig user that runs a credential plugin (`exec`, as EKS's and GKE's kubeconfigs do) or names an
`auth-provider` (oidc, gcp): kubernetes-asyncio's loader runs it, and its result becomes Towline's connection.

The one module that imports kubernetes-asyncio, and only `towline.k8s.kubeconfig.load` imports it, for such a
user: every other connection (a pod's service account, a token, a client certificate) never loads the library.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.kube_config import EXPIRY_SKEW_PREVENTION_DELAY, KubeConfigLoader

from towline.k8s.connection import Connection, ConnectionProblem, tls_context


class PluginCredential:
    """The plugin's token, obtained again by running the plugin once the token it gave has expired (when it
    said when: an `expirationTimestamp`)."""

    def __init__(self, loader: KubeConfigLoader, configuration: Configuration) -> None:
        self._loader = loader
        self._configuration = configuration

    def __repr__(self) -> str:
        return "PluginCredential()"

    async def authorization(self) -> str | None:
        expiry: datetime | None = getattr(self._loader, "exec_plugin_expiry", None)
        if expiry is not None and expiry - EXPIRY_SKEW_PREVENTION_DELAY <= datetime.now(UTC):
            await _load(self._loader, self._configuration)
        value: Any = self._configuration.api_key.get("BearerToken")
        return str(value) if value else None


async def load(document: dict[str, Any], context: str) -> Connection:
    """The connection of `context` in the merged kubeconfig `document` (its file fields already absolute)."""
    configuration = Configuration()
    loader = KubeConfigLoader(config_dict=document, active_context=context, config_base_path="")
    await _load(loader, configuration)
    host = str(configuration.host)
    tls = None
    if host.startswith("https"):
        try:
            tls = tls_context(ca_file=configuration.ssl_ca_cert, insecure=not configuration.verify_ssl,
                              client_cert=configuration.cert_file, client_key=configuration.key_file)
        except ConnectionProblem as problem:
            raise ConnectionProblem(f"kubeconfig context {context}: {problem}") from None
    return Connection(server=host, tls=tls, credential=PluginCredential(loader, configuration),
                      proxy=configuration.proxy or None, server_name=configuration.tls_server_name or None)


async def _load(loader: KubeConfigLoader, configuration: Configuration) -> None:
    try:
        await loader.load_and_set(configuration)
    except (ConfigException, OSError) as error:  # OSError: the plugin's command cannot be run
        raise ConnectionProblem(f"kubeconfig: {' '.join(str(error).split())}") from None

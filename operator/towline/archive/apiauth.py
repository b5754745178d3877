"""Who is asking, and may they: the archive API's authentication by the front proxy and its authorization by
SubjectAccessReview.

The API server authenticates the person (client certificate, token, OIDC: whatever it is configured with) and
proxies the request here over TLS with its front-proxy client certificate, naming the user in X-Remote-User,
X-Remote-Group and X-Remote-Extra-* (as it does for every aggregated API: metrics-server's too). Those headers are
believed only from a connection whose client certificate chains to the request-header CA and whose common name
is an allowed one, both read from the ConfigMap kube-system/extension-apiserver-authentication the API server
publishes. A connection without that certificate is anonymous: it gets discovery and health, never a record.

Never trusts a header from anyone else, and never caches an answer for longer than `SAR_CACHE_SECONDS`.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from multidict import CIMultiDictProxy

from towline.k8s.client import KubeApi, Resource

AUTH_NAMESPACE = "kube-system"
AUTH_CONFIGMAP = "extension-apiserver-authentication"
CONFIG_MAPS = Resource("", "v1", "configmaps")
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io", "v1", "subjectaccessreviews", namespaced=False)

SAR_CACHE_SECONDS = 5.0
"""How long an answer of the API server's authorizer is reused for the same person and question: a revoked
RoleBinding takes effect here at most this much later than on the API server itself."""
SAR_CACHE_ENTRIES = 4096


class NotConfigured(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """The API server publishes no request-header CA: it was started without --requestheader-client-ca-file."""


@dataclass(frozen=True)
class FrontProxyConfig:
    """What the API server published for aggregated APIs: whom to believe, and which headers name the user."""

    client_ca_pem: str
    allowed_names: tuple[str, ...]
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_header_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> FrontProxyConfig:
        ca = data.get("requestheader-client-ca-file") or ""
        if "BEGIN CERTIFICATE" not in ca:
            raise NotConfigured(
                f"{AUTH_NAMESPACE}/{AUTH_CONFIGMAP} has no requestheader-client-ca-file: the API server was started "
                "without --requestheader-client-ca-file, so it cannot proxy to an aggregated API (set it, and "
                "--proxy-client-cert-file/--proxy-client-key-file, as kubeadm does)")

        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            text = data.get(key)
            if text is None:
                return default
            value = json.loads(text)
            return tuple(str(v) for v in value) if isinstance(value, list) else default

        return cls(
            client_ca_pem=ca,
            allowed_names=names("requestheader-allowed-names", ()),
            username_headers=names("requestheader-username-headers", cls.username_headers),
            group_headers=names("requestheader-group-headers", cls.group_headers),
            extra_header_prefixes=names("requestheader-extra-headers-prefix", cls.extra_header_prefixes),
        )


async def read_front_proxy_config(kube: KubeApi) -> FrontProxyConfig:
    """The ConfigMap as the API server keeps it (the chart grants `get` on it through the standard Role
    extension-apiserver-authentication-reader)."""
    body = await kube.get(CONFIG_MAPS.path(AUTH_NAMESPACE, AUTH_CONFIGMAP))
    if body is None:
        raise NotConfigured(f"{AUTH_NAMESPACE}/{AUTH_CONFIGMAP} does not exist: the API server publishes it "
                            "when it has a client or request-header CA")
    return FrontProxyConfig.from_configmap(body.get("data") or {})


def server_ssl_context(cert_file: Path, key_file: Path, config: FrontProxyConfig) -> ssl.SSLContext:
    """TLS with the archive's serving certificate, asking (not requiring) a client certificate and verifying any
    one given against the request-header CA: a client without one is anonymous, one with a certificate of another
    CA fails the handshake."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=config.client_ca_pem)
    return context


class SwappableContext:
    """The SSLContext the server listens with, whose certificates and trusted CA can be replaced while it runs (a
    renewed serving certificate, a rotated front-proxy CA): each new handshake moves to the newest context before
    a certificate is chosen (OpenSSL calls the server-name callback with or without SNI)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.listening = self.current = context
        context.sni_callback = self._choose

    def replace(self, context: ssl.SSLContext) -> None:
        self.current = context

    def _choose(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        if connection.context is not self.current:
            connection.context = self.current


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    uid: str = ""


def peer_common_name(peer: Mapping[str, Any] | None) -> str | None:
    """The CN of a verified client certificate (`ssl.SSLObject.getpeercert()`), or None without one."""
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def front_proxy_user(config: FrontProxyConfig, peer: Mapping[str, Any] | None,
                     headers: CIMultiDictProxy[str]) -> UserInfo | None:
    """The person the API server vouches for, or None: no verified front-proxy certificate (its chain was checked
    in the handshake), a name outside requestheader-allowed-names, or no user header. Headers from anyone else are
    ignored, never believed."""
    common_name = peer_common_name(peer)
    if common_name is None:
        return None
    if config.allowed_names and common_name not in config.allowed_names:
        return None
    name = next((headers[h] for h in config.username_headers if headers.get(h)), "")
    if not name:
        return None
    groups = tuple(value for h in config.group_headers for value in headers.getall(h, ()))
    extra: dict[str, list[str]] = {}
    for header, value in headers.items():
        for prefix in config.extra_header_prefixes:
            if header.lower().startswith(prefix.lower()):
                key = urllib.parse.unquote(header[len(prefix):]).lower()
                extra.setdefault(key, []).append(value)
    return UserInfo(name=name, groups=groups, extra=tuple(sorted((k, tuple(v)) for k, v in extra.items())))


@dataclass(frozen=True)
class Question:
    """May the user `verb` `resource` (`subresource`) of `group` in `namespace` ("" for every namespace)?"""

    verb: str
    group: str
    resource: str
    namespace: str
    subresource: str = ""

    def describe(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        what = f"{what}.{self.group}" if self.group else what
        where = f'in the namespace "{self.namespace}"' if self.namespace else "in every namespace"
        return f"{self.verb} {what} {where}"


class Requests(Protocol):
    """The one call the authorizer makes (towline.k8s.client.KubeApi makes it)."""

    async def request(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]: ...


@dataclass
class Authorizer:
    """SubjectAccessReviews through the API server's own authorizer (RBAC, webhooks: whatever it runs), each answer
    kept `SAR_CACHE_SECONDS` for the same person and question, at most `SAR_CACHE_ENTRIES` of them."""

    kube: Requests
    clock: Callable[[], float] = time.monotonic
    ttl: float = SAR_CACHE_SECONDS
    bound: int = SAR_CACHE_ENTRIES
    _answers: OrderedDict[tuple[UserInfo, Question], tuple[float, bool]] = field(default_factory=OrderedDict)

    async def allowed(self, user: UserInfo, question: Question) -> bool:
        key = (user, question)
        kept = self._answers.get(key)
        now = self.clock()
        if kept is not None and kept[0] > now:
            return kept[1]
        answer = await self._ask(user, question)
        self._answers[key] = (now + self.ttl, answer)
        self._answers.move_to_end(key)
        while len(self._answers) > self.bound:
            self._answers.popitem(last=False)
        return answer

    async def _ask(self, user: UserInfo, question: Question) -> bool:
        attributes: dict[str, str] = {"verb": question.verb, "group": question.group, "resource": question.resource}
        if question.namespace:
            attributes["namespace"] = question.namespace
        if question.subresource:
            attributes["subresource"] = question.subresource
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups), "resourceAttributes": attributes}
        if user.extra:
            spec["extra"] = {key: list(values) for key, values in user.extra}
        if user.uid:
            spec["uid"] = user.uid
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        answer = await self.kube.request("POST", SUBJECT_ACCESS_REVIEWS.path(), body=review)
        return bool((answer.get("status") or {}).get("allowed"))

"""One guarded HTTP exchange, shared by every HTTP-speaking action.

Redirects are followed here, by hand, so each hop is checked against the guard
before anything is sent; credentials are dropped when a redirect changes origin.
Transport failures become error classes: a mutating request whose bytes left
the pod without a complete answer is `unknown_side_effect`, never `transient`.

This module must never put a URL path or query into a message (they may hold a
secret, e.g. a Slack webhook URL); messages name the method and host only.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.httpxlib import httpx
from towline_connectors.models import CredentialRef
from towline_connectors.netguard import DestinationRefusedError, NetGuard, ResolutionError
from towline_connectors.redact import Redactor

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_ALWAYS_SENSITIVE = ("authorization", "proxy-authorization", "cookie")
_SNIPPET_CHARS = 300
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class HttpCall:
    """A request as an action wants it sent."""

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    content: bytes | None = None
    mutating: bool = False
    timeout_seconds: float = 30.0
    follow_redirects: bool = False
    max_redirects: int = 5
    max_response_bytes: int = 1024 * 1024
    # Extra header names to drop when a redirect leaves the origin (custom auth).
    sensitive_headers: tuple[str, ...] = ()
    # How messages name the destination when the URL itself is a secret.
    label: str | None = None


@dataclass(frozen=True)
class HttpReply:
    status: int
    headers: httpx.Headers
    body: bytes
    url: httpx.URL
    what: str
    redactor: Redactor | None = None
    """The step's redactor: the body is redacted before it is cut short for a message."""

    def head(self, limit: int) -> str:
        """The start of the body, redacted first, so a secret straddling the cut leaves no prefix behind."""
        text = self.body.decode("utf-8", "replace").strip()
        return (self.redactor or Redactor()).clip(text, limit, marker="…").strip()

    def snippet(self) -> str:
        """The start of the body, for error messages."""
        text = self.head(_SNIPPET_CHARS)
        return f": {text}" if text else ""


def parse_url(raw: str, what: str = "url") -> httpx.URL:
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL as exc:
        raise ActionError(ErrorClass.VALIDATION, f"{what} is not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ActionError(ErrorClass.VALIDATION, f"{what} must be an absolute http:// or https:// URL")
    if url.userinfo:
        raise ActionError(
            ErrorClass.VALIDATION,
            f"{what} contains a user name or password; put credentials in `auth` with a credential reference",
        )
    return url


def header_safe_secret(ctx: ActionContext, ref: CredentialRef) -> str:
    """A credential value that can go in a header; a line break in it is a broken Secret."""
    value = ctx.secret(ref)
    if CONTROL_CHARS.search(value):
        raise ActionError(
            ErrorClass.AUTH,
            f"credential {ref} contains a line break or control character, which cannot go in an HTTP header; "
            f"fix the Secret",
        )
    return value


def check_destination(guard: NetGuard, url: httpx.URL, what: str) -> None:
    """Refuse a hop before sending when its host is refused by name or literal address."""
    try:
        guard.check_host(url.host)
    except DestinationRefusedError as exc:
        raise ActionError(ErrorClass.PERMANENT, f"{what}: {exc}") from None


async def send(ctx: ActionContext, call: HttpCall, *, guard: NetGuard | None = None) -> HttpReply:
    """Send `call`, following redirects when asked, and return the final reply."""
    guard = guard or ctx.guard
    url = parse_url(call.url, call.label or "url")
    method = call.method.upper()
    headers = httpx.Headers(dict(call.headers))
    content = call.content
    hops = 0
    async with ctx.http_client(guard) as client:
        while True:
            what = call.label or f"{method} {url.host}"
            check_destination(guard, url, what)
            reply = await _exchange(
                ctx, client, call, method=method, url=url, headers=headers, content=content, what=what
            )
            target = _redirect_target(reply) if call.follow_redirects else None
            if target is None:
                return reply
            if hops >= call.max_redirects:
                raise ActionError(
                    ErrorClass.PERMANENT,
                    f"{what} redirected more than {call.max_redirects} times; point the step at the final URL",
                )
            hops += 1
            method, content = _redirected_method(reply.status, method, content)
            if content is None:
                for name in ("content-type", "content-length"):
                    headers.pop(name, None)
            if _origin(target) != _origin(url):
                for name in (*_ALWAYS_SENSITIVE, *call.sensitive_headers):
                    headers.pop(name, None)
            url = target


async def _exchange(
    ctx: ActionContext,
    client: httpx.AsyncClient,
    call: HttpCall,
    *,
    method: str,
    url: httpx.URL,
    headers: httpx.Headers,
    content: bytes | None,
    what: str,
) -> HttpReply:
    snapshot = ctx.side_effects.snapshot()
    timeout = ctx.deadline.clamp(call.timeout_seconds)
    try:
        async with client.stream(method, url, headers=headers, content=content, timeout=timeout) as response:
            body = await _read_capped(response, call.max_response_bytes, what)
            return HttpReply(response.status_code, response.headers, body, url, what, ctx.redactor)
    except DestinationRefusedError as exc:
        raise ActionError(ErrorClass.PERMANENT, f"{what}: {exc}") from None
    except ResolutionError as exc:
        error_class = ErrorClass.TRANSIENT if exc.temporary else ErrorClass.PERMANENT
        raise ActionError(error_class, f"{what}: {exc}") from None
    except httpx.HTTPError as exc:
        sent = ctx.side_effects.sent_since(snapshot)
        raise classify_transport_error(exc, what, maybe_delivered=call.mutating and sent) from exc


async def _read_capped(response: httpx.Response, limit: int, what: str) -> bytes:
    """Read at most `limit` bytes (after decompression, so a gzip bomb is capped too)."""
    too_large = ActionError(
        ErrorClass.PERMANENT,
        f"the response from {what} (HTTP {response.status_code}) is larger than maxResponseBytes={limit}; "
        f"raise the cap or ask the API for less",
    )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit and not response.headers.get("content-encoding"):
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def classify_transport_error(exc: httpx.HTTPError, what: str, *, maybe_delivered: bool) -> ActionError:
    """The error class of a failure with no HTTP status to go by."""
    detail = str(exc) or type(exc).__name__
    if _caused_by(exc, ssl.SSLCertVerificationError):
        return ActionError(ErrorClass.PERMANENT, f"{what}: TLS certificate verification failed ({detail})")
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return ActionError(ErrorClass.TRANSIENT, f"{what}: could not connect ({detail})")
    if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
        return ActionError(ErrorClass.PERMANENT, f"{what}: the request could not be sent ({detail})")
    if maybe_delivered:
        return ActionError(
            ErrorClass.UNKNOWN_SIDE_EFFECT,
            f"{what}: the request was sent but no complete response arrived ({detail}); "
            f"it may have taken effect, so check before replaying it",
        )
    if isinstance(exc, httpx.TimeoutException):
        return ActionError(ErrorClass.TRANSIENT, f"{what}: timed out ({detail})")
    return ActionError(ErrorClass.TRANSIENT, f"{what}: {type(exc).__name__} ({detail})")


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _redirect_target(reply: HttpReply) -> httpx.URL | None:
    location = reply.headers.get("location")
    if reply.status not in _REDIRECT_STATUSES or not location:
        return None
    try:
        target = reply.url.join(location)
    except httpx.InvalidURL:
        raise ActionError(ErrorClass.PERMANENT, f"{reply.what} redirected to an invalid URL") from None
    if target.scheme not in ("http", "https"):
        raise ActionError(ErrorClass.PERMANENT, f"{reply.what} redirected to a non-HTTP URL ({target.scheme}:)")
    return target


def _redirected_method(status: int, method: str, content: bytes | None) -> tuple[str, bytes | None]:
    """Browsers' rules, as httpx applies them: 303 (and 301/302 after POST) become GET."""
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        return "GET", None
    return method, content


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port

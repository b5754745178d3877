"""One signed delivery through the SSRF guard: the operator sends its CloudEvents (towline.eventsink) with this.

The body is POSTed as it is, signed the Standard Webhooks way (towline_connectors.signing, as `webhook.send` signs),
over the guarded transport (towline_connectors.transport: the host resolved once, every address checked, the socket
opened to a checked one; no proxy variables, no redirects followed). The answer's body is never read. A failure is
an ActionError whose class says whether another try may succeed (transient, rate_limit: with the receiver's
Retry-After) or not (a refused destination, a redirect, 410 Gone, another 4xx, a bad secret).

This module must never put the secret, the body or the receiver's answer into an error message.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from towline_connectors.errors import ActionError, ErrorClass, classify_http_status
from towline_connectors.httpcall import classify_transport_error
from towline_connectors.httpxlib import httpx
from towline_connectors.netguard import DestinationRefusedError, NetGuard, ResolutionError
from towline_connectors.runtime import SideEffectTracker
from towline_connectors.signing import sign
from towline_connectors.transport import Connector, build_client


@dataclass(frozen=True)
class SignedDelivery:
    url: str
    body: bytes
    msg_id: str
    """webhook-id: the receiver deduplicates by it."""
    timestamp: int
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 10.0


async def post_signed(delivery: SignedDelivery, secrets: str, guard: NetGuard, ssl_context: ssl.SSLContext, *,
                      now: float, connector: Connector | None = None) -> int:
    """POST the delivery signed with `secrets` (whsec_/whsk_, space-separated); the receiver's 2xx status.

    Raises ActionError: retry it only when its class is transient or rate_limit (retry_after_seconds set when the
    receiver said when)."""
    url = httpx.URL(delivery.url)
    what = f"POST {url.host}"
    headers = {
        **delivery.headers, "Content-Type": delivery.content_type, "webhook-id": delivery.msg_id,
        "webhook-timestamp": str(delivery.timestamp),
        "webhook-signature": sign(secrets, delivery.msg_id, delivery.timestamp, delivery.body),
    }
    try:
        guard.check_host(url.host)
        async with build_client(guard, SideEffectTracker(), ssl_context, connector) as client, client.stream(
                "POST", url, headers=headers, content=delivery.body, timeout=delivery.timeout_seconds) as response:
            status, answer = response.status_code, response.headers
    except DestinationRefusedError as exc:
        raise ActionError(ErrorClass.PERMANENT, f"{what}: {exc}") from None
    except ResolutionError as exc:
        raise ActionError(ErrorClass.TRANSIENT if exc.temporary else ErrorClass.PERMANENT, f"{what}: {exc}") from None
    except httpx.HTTPError as exc:
        raise classify_transport_error(exc, what, maybe_delivered=False) from None
    if 300 <= status < 400:
        raise ActionError(ErrorClass.PERMANENT, f"{what} answered HTTP {status} (a redirect, not followed); "
                          "set the sink's URL to where it redirects")
    if status == 410:
        raise ActionError(ErrorClass.PERMANENT, f"{what} answered 410 Gone: the receiver wants no more events")
    error = classify_http_status(status, answer, now=now, what=what)
    if error is not None:
        raise error
    return status

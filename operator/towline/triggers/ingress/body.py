"""Reading a delivery's body: capped, timed, at a minimum rate, within the byte budget, MAC fed as it comes.

A slow sender is cut as soon as it falls behind `min_bytes_per_second`
(after a short grace), not only at the overall timeout, so a slow-body
flood holds each slot for about a second. Bytes are taken from the lease
before they are kept (the whole Content-Length up front when the sender
states one), so bodies in memory never exceed the process's and the
namespace's byte budgets. Never logs or returns a byte of the body in a
refusal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import StreamReader

from towline.triggers.ingress.capacity import Lease
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.verify import BodyMac

CHUNK = 65536


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int
    """The trigger's maxBodyBytes."""
    timeout_seconds: float
    """The whole body must have arrived by then."""
    min_bytes_per_second: float
    """After the grace, at least this many bytes a second on average, or the body is cut."""
    grace_seconds: float


def busy(message: str) -> Refusal:
    return Refusal(503, "Busy", message, retry_after=1)


async def read_body(  # noqa: PLR0911 - one early answer per limit
    content: StreamReader, content_length: int | None, limits: BodyLimits, lease: Lease, mac: BodyMac | None,
    *, monotonic: Callable[[], float],
) -> bytes | Refusal:
    too_large = Refusal(413, "BodyTooLarge", f"the body is larger than the trigger's maxBodyBytes ({limits.max_bytes})")
    if content_length is not None:
        if content_length > limits.max_bytes:
            return too_large
        if not lease.grow(content_length):
            return busy("the ingress is buffering as many bodies as it may; retry shortly")
    prepaid = content_length or 0
    body = bytearray()
    started = monotonic()
    deadline = started + limits.timeout_seconds
    while True:
        # By `due`, more must have arrived than has: `min_bytes_per_second` since the grace ended.
        due = started + limits.grace_seconds + len(body) / limits.min_bytes_per_second
        wait = min(due, deadline) - monotonic()
        try:
            if wait <= 0:
                raise TimeoutError
            chunk = await asyncio.wait_for(content.read(CHUNK), wait)
        except TimeoutError:
            if due < deadline:
                return Refusal(408, "BodyTooSlow", f"the body arrived slower than {limits.min_bytes_per_second:g} "
                               "bytes a second; send it at once")
            return Refusal(408, "BodyTimeout", f"the body did not arrive within {limits.timeout_seconds:g} s")
        if not chunk:
            return bytes(body)
        if len(body) + len(chunk) > limits.max_bytes:
            return too_large
        unpaid = max(0, len(body) + len(chunk) - prepaid)
        if unpaid and not lease.grow(unpaid):
            return busy("the ingress is buffering as many bodies as it may; retry shortly")
        prepaid = max(prepaid, len(body) + len(chunk))
        body += chunk
        if mac is not None:
            mac.update(chunk)

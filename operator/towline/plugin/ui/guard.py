"""Who may talk to the local web server: only the browser tab that was handed the launch URL.

The server listens on 127.0.0.1, which every local user and, through DNS
rebinding or cross-site requests, every web site the person visits can reach.
So each request must carry the per-launch token (in the URL: a cookie would be
sent to any other server on 127.0.0.1, whatever its port), name this server in
Host (a rebound name does not), and, if the browser says where it comes from,
come from this server's own origin. Writes must say so (browsers always send
Origin on a POST). Pure functions: the aiohttp middleware only applies them.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping

TOKEN_PARAMETER = "t"  # noqa: S105 - the query parameter's name, not a secret


def new_token() -> str:
    """256 bits from the OS's generator, URL-safe."""
    return secrets.token_urlsafe(32)


def allowed_hosts(port: int) -> frozenset[str]:
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})


def refusal(*, method: str, path: str, headers: Mapping[str, str], token: str | None,
            expected_token: str, port: int) -> str | None:
    """Why the request is refused, or None if it may go on.

    Static assets (the page's own script, style and the layout library) carry no
    data and are served without the token, but only to this server's Host.
    """
    why = _foreign(method, headers, port)
    if why is not None or path.startswith("/static/"):
        return why
    if token is None or not hmac.compare_digest(token.encode(), expected_token.encode()):
        return "missing or wrong launch token: open the URL `kubectl towline ui` printed"
    return None


def _foreign(method: str, headers: Mapping[str, str], port: int) -> str | None:
    """Why the request does not come from this server's own pages (DNS rebinding, another site)."""
    hosts = allowed_hosts(port)
    host = headers.get("Host", "")
    if host not in hosts:
        return f"Host {host!r} is not this server (expected 127.0.0.1:{port})"
    origin = headers.get("Origin")
    if origin is not None and origin not in {f"http://{h}" for h in hosts}:
        return f"Origin {origin!r} is not this server"
    if headers.get("Sec-Fetch-Site") == "cross-site":
        return "cross-site requests are refused"
    if method not in {"GET", "HEAD"} and origin is None:
        return "a write must carry this server's Origin"
    return None

"""Who may talk to the local web server: only the browser that redeemed this launch's one-time code.

The server listens on 127.0.0.1, which every local user and, through DNS
rebinding or cross-site requests, every web site the person visits can reach.
The URL `kubectl towline ui` prints and hands the browser (whose command line
every local user can read in /proc) carries only a one-time code: it opens one
session on first use, dies then, and dies unused after CODE_SECONDS. The
session is an HttpOnly, SameSite=Strict cookie named for this server's port (a
cookie for 127.0.0.1 is sent to every port, so two web views in one browser
need two names), never in a URL, never readable by the page's script.

A second use of the code by a client without this launch's session ends the
session the first use opened: a local user who read the code and raced the
browser to it loses what they took, and the person sees why and starts again.

Every request must also name this server in Host (a rebound name does not)
and, if the browser says where it comes from, come from this server's own
origin; writes must say so (browsers always send Origin on a POST). Pure: the
clock is passed in; the aiohttp middleware only applies what is decided here.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

CODE_PARAMETER = "code"
LOGIN_PATH = "/login"
CODE_SECONDS = 120.0
"""How long an unused launch code stays good: long enough to copy the printed URL into a browser."""


def new_secret() -> str:
    """256 bits from the OS's generator, URL-safe."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    return f"towline-{port}"


def allowed_hosts(port: int) -> frozenset[str]:
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})


def same_secret(given: str | None, expected: str | None) -> bool:
    return given is not None and expected is not None and hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class Opened:
    """The code was redeemed: set this session's cookie (None: the client already holds the session)."""

    session: str | None


class Launch:
    """One launch's code and the one session it may open."""

    def __init__(self, clock: Callable[[], float], *, code_seconds: float = CODE_SECONDS) -> None:
        self.code = new_secret()
        self.csrf = new_secret()
        """The token the pages' writes carry (towline.plugin.ui.person.CSRF_HEADER), besides the Origin check."""
        self._clock = clock
        self._expires = clock() + code_seconds
        self._used = False
        self._session: str | None = None

    def signed_in(self, session: str | None) -> bool:
        return same_secret(session, self._session)

    def redeem(self, code: str | None, session: str | None) -> Opened | str:
        """Exchange the code for a session, or say why not (the text the browser shows)."""
        if not same_secret(code, self.code):
            return "not this launch's code: open the URL `kubectl towline ui` printed"
        if self.signed_in(session):
            return Opened(None)  # this browser again (Back, a reload): nothing new to hand out
        if self._used:
            self._session = None
            return ("this launch code was already used, by a client without its session: the session it opened "
                    "is ended. If that was not your browser, someone else read the code; start `kubectl towline "
                    "ui` again")
        if self._clock() >= self._expires:
            return (f"this launch code expired unused (it lasts {CODE_SECONDS:.0f} s): start `kubectl towline ui` "
                    "again and open the new URL")
        self._used = True
        self._session = new_secret()
        return Opened(self._session)


def refusal(*, method: str, path: str, headers: Mapping[str, str], signed_in: bool, port: int) -> str | None:
    """Why the request is refused, or None if it may go on.

    Static assets (the page's own script, style and the layout library) carry no
    data and are served without a session, but only to this server's Host; the
    login path checks its code itself.
    """
    why = _foreign(method, headers, port)
    if why is not None or path.startswith("/static/") or path == LOGIN_PATH:
        return why
    if not signed_in:
        return "no session: open the URL `kubectl towline ui` printed (its code works once)"
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

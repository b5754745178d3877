"""The in-cluster web view's sign-in state, kept on the server: sessions and logins in progress.

The browser holds only a random session id (256 bits) in an HttpOnly cookie; the person's ID token, their name
as the API server saw it and the CSRF token stay here. A session ends on logout, after IDLE_SECONDS without a
request, after ABSOLUTE_SECONDS from sign-in, and when its ID token expires (the API server would refuse it from
then on): an id that ended is forgotten, so a copy of the cookie taken earlier opens nothing.

Pure: the clock and the random source are passed in. Never logs or returns an ID token except to the
per-person client that carries it to the API server.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from towline.plugin.ui.guard import same_secret

IDLE_SECONDS = 30 * 60.0
ABSOLUTE_SECONDS = 8 * 3600.0
LOGIN_SECONDS = 600.0
"""How long a sign-in may take at the provider before its state is forgotten."""
MAX_PENDING_LOGINS = 10_000
"""Logins in progress kept at once: each unauthenticated visit starts one, so the oldest go first."""


def new_secret() -> str:
    """256 bits from the OS's generator, URL-safe."""
    return secrets.token_urlsafe(32)


def _key(session_id: str) -> str:
    # Looked up by digest, so the dictionary's string comparison never runs on the secret itself.
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass
class Session:
    """One signed-in browser."""

    id: str
    user: str
    """The username the API server authenticated the ID token as (its SelfSubjectReview), never a claim read here."""
    groups: tuple[str, ...]
    id_token: str = field(repr=False)
    csrf: str = field(repr=False)
    created: float
    last_seen: float
    token_expires: float


class SessionStore:
    """Sessions by id; expired ones are removed when looked up (and swept on each sign-in)."""

    def __init__(self, clock: Callable[[], float], *, idle_seconds: float = IDLE_SECONDS,
                 absolute_seconds: float = ABSOLUTE_SECONDS, random: Callable[[], str] = new_secret) -> None:
        self._clock = clock
        self.idle_seconds = idle_seconds
        self.absolute_seconds = absolute_seconds
        self._random = random
        self._sessions: dict[str, Session] = {}

    def open(self, *, user: str, groups: tuple[str, ...], id_token: str, token_expires: float) -> Session:
        self.sweep()
        now = self._clock()
        session = Session(id=self._random(), user=user, groups=groups, id_token=id_token, csrf=self._random(),
                          created=now, last_seen=now, token_expires=token_expires)
        self._sessions[_key(session.id)] = session
        return session

    def expiry_reason(self, session: Session) -> str | None:
        """Why `session` is over now, or None while it lasts."""
        now = self._clock()
        if now - session.last_seen >= self.idle_seconds:
            return f"idle for {self.idle_seconds / 60:.0f} minutes"
        if now - session.created >= self.absolute_seconds:
            return f"signed in more than {self.absolute_seconds / 3600:g} hours ago"
        if now >= session.token_expires:
            return "the identity provider's token expired"
        return None

    def find(self, session_id: str | None) -> Session | None:
        """The live session of this id (its idle time starts again), or None; an expired one is ended."""
        if not session_id:
            return None
        session = self._sessions.get(_key(session_id))
        if session is None or not same_secret(session_id, session.id):
            return None
        if self.expiry_reason(session) is not None:
            del self._sessions[_key(session_id)]
            return None
        session.last_seen = self._clock()
        return session

    def lasts(self, session_id: str) -> bool:
        """Whether the session is still live, without counting this as a request (an open stream is not one);
        an expired one is ended."""
        session = self._sessions.get(_key(session_id))
        if session is None:
            return False
        if self.expiry_reason(session) is not None:
            del self._sessions[_key(session_id)]
            return False
        return True

    def end(self, session_id: str | None) -> bool:
        """Forget the session (logout); True if it was there."""
        return bool(session_id) and self._sessions.pop(_key(session_id or ""), None) is not None

    def sweep(self) -> None:
        for key, session in list(self._sessions.items()):
            if self.expiry_reason(session) is not None:
                del self._sessions[key]

    def __len__(self) -> int:
        return len(self._sessions)


@dataclass(frozen=True)
class PendingLogin:
    """What the callback needs to finish one sign-in: bound to `state`, used once."""

    state: str
    nonce: str
    verifier: str = field(repr=False)
    return_to: str
    started: float


class PendingLogins:
    """Logins sent to the provider and not yet back; each `state` is taken once, within LOGIN_SECONDS."""

    def __init__(self, clock: Callable[[], float], *, seconds: float = LOGIN_SECONDS,
                 limit: int = MAX_PENDING_LOGINS, random: Callable[[], str] = new_secret) -> None:
        self._clock = clock
        self._seconds = seconds
        self._limit = limit
        self._random = random
        self._pending: OrderedDict[str, PendingLogin] = OrderedDict()

    def start(self, return_to: str) -> PendingLogin:
        login = PendingLogin(state=self._random(), nonce=self._random(), verifier=self._random() + self._random(),
                             return_to=safe_return_path(return_to), started=self._clock())
        self._pending[login.state] = login
        while len(self._pending) > self._limit:
            self._pending.popitem(last=False)
        return login

    def take(self, state: str | None) -> PendingLogin | None:
        if not state:
            return None
        login = self._pending.pop(state, None)
        if login is None or self._clock() - login.started >= self._seconds:
            return None
        return login


def safe_return_path(value: str | None) -> str:
    """`value` if it is a path on this server (with its query), else "/": after sign-in the browser goes back only
    to a same-origin page, never to another site (`//evil.example`, `/\\evil.example`, `https://...`)."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(ord(character) < 0x20 or ord(character) == 0x7F or character == "\\" for character in value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value

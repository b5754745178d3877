"""The in-cluster web view's door: OpenID Connect sign-in, server-side sessions, and the person's own token.

A browser without a live session is sent to the provider (authorization code with PKCE) and back to the page it
asked for, a path on this server only. After the provider's ID token passes its checks (towline.plugin.ui.oidc),
the API server itself is asked who the token is (SelfSubjectReview): that name, never a claim read here and never
a request header, is the person. Every later call of that browser carries the same ID token as its bearer; the
pod's own ServiceAccount token is never mounted, so there is none to fall back on.

Cookies: the session id in `__Host-towline-session` (HttpOnly, Secure, SameSite=Lax, Path=/, no Domain), and
during a sign-in the login's state in `__Host-towline-login`, which binds the provider's answer to the browser
that asked (no login CSRF). A write must come from the view's own origin and carry the session's CSRF token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from towline.k8s import session as k8s_session
from towline.k8s.client import ApiError, KubeApi
from towline.plugin.ui import person
from towline.plugin.ui.guard import same_secret
from towline.plugin.ui.oidc import Provider, SignInError
from towline.plugin.ui.sessions import PendingLogin, PendingLogins, SessionStore, safe_return_path

log = logging.getLogger(__name__)

SESSION_COOKIE = "__Host-towline-session"
LOGIN_COOKIE = "__Host-towline-login"
LOGIN_PATH = "/auth/login"
CALLBACK_PATH = "/auth/callback"
SIGNOUT_PATH = "/auth/signout"
OPEN_PATHS = frozenset({LOGIN_PATH, CALLBACK_PATH, SIGNOUT_PATH + "/done", "/healthz"})
"""Paths that need no session: the sign-in itself, the signed-out page and the probe."""
DATA_PREFIXES = ("/api/", "/events/")


@dataclass(frozen=True)
class Site:
    """Where the view is reached and what it serves by default."""

    public_url: str
    """The address people open (`ui.url`), e.g. https://towline.example.com: the only Origin writes may carry."""
    default_namespace: str

    @property
    def origin(self) -> str:
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}"


def _data_path(path: str) -> bool:
    """A JSON or event-stream path (with or without /ns/<namespace>/), which a script fetches, not a person."""
    if path.startswith("/ns/"):
        path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else path
    return path.startswith(DATA_PREFIXES)


class SignInDoor:
    """Admits a request with a live session as its person; sends anyone else to sign in."""

    def __init__(self, *, site: Site, provider: Provider, sessions: SessionStore, logins: PendingLogins,
                 base_api: KubeApi) -> None:
        self.site = site
        self.provider = provider
        self.sessions = sessions
        self.logins = logins
        self.base_api = base_api

    async def admit(self, request: web.Request) -> person.Person | web.StreamResponse | None:
        writing = request.method not in {"GET", "HEAD"}
        if writing and request.headers.get("Origin") != self.site.origin:
            return web.Response(status=403, text=f"refused: a write must come from this view's own pages (Origin "
                                                 f"{self.site.origin}); reload the page and try again\n")
        if request.path.startswith("/static/") or request.path in OPEN_PATHS:
            return None
        found = self.sessions.find(request.cookies.get(SESSION_COOKIE))
        if found is None:
            if writing or _data_path(request.path):
                return web.json_response({"status": 401, "message": "not signed in, or the session ended: reload "
                                                                    "the page to sign in again"}, status=401)
            return web.Response(status=303, headers={"Location": f"{LOGIN_PATH}?{urlencode({'next': request.path_qs})}"
                                                     })
        session_id = found.id
        return person.Person(api=self.base_api.as_bearer(found.id_token), user=found.user, csrf=found.csrf,
                             default_namespace=self.site.default_namespace,
                             alive=lambda: self.sessions.lasts(session_id))

    async def login(self, request: web.Request) -> web.StreamResponse:
        """Start a sign-in: remember state, nonce and PKCE verifier here; send the browser to the provider."""
        pending = self.logins.start(request.query.get("next", "/"))
        try:
            url = await self.provider.authorization_url(state=pending.state, nonce=pending.nonce,
                                                        verifier=pending.verifier)
        except SignInError as error:
            log.warning("sign-in cannot start: %s", error)
            return web.Response(status=502, text=f"sign-in is not available: {error}\n")
        response = web.Response(status=303, headers={"Location": url})
        response.set_cookie(LOGIN_COOKIE, pending.state, path="/", httponly=True, secure=True, samesite="Lax",
                            max_age=600)
        return response

    def _answer(self, request: web.Request) -> tuple[PendingLogin, str] | web.Response:
        """This browser's pending login and the provider's code, or why the answer is refused."""
        state = request.query.get("state")
        if not same_secret(request.cookies.get(LOGIN_COOKIE), state):
            return _refused(400, "this sign-in was not started by this browser (or its cookie expired): "
                                 f"open {LOGIN_PATH} again")
        pending = self.logins.take(state)
        if pending is None:
            return _refused(400, f"this sign-in is unknown or took longer than 10 minutes: open {LOGIN_PATH} again")
        if "error" in request.query:
            return _refused(403, f"the identity provider said {request.query['error'][:100]!r}: "
                                 f"{request.query.get('error_description', '')[:300]}")
        code = request.query.get("code")
        if not code:
            return _refused(400, "the identity provider's answer has no code")
        return pending, code

    async def callback(self, request: web.Request) -> web.StreamResponse:
        """The provider's answer: check it is this browser's login, trade the code, ask the API server who it is."""
        answer = self._answer(request)
        if isinstance(answer, web.Response):
            return answer
        pending, code = answer
        try:
            token, claims = await self.provider.sign_in(code, pending.verifier, pending.nonce)
        except SignInError as error:
            log.warning("sign-in refused: %s", error)
            return _refused(403, f"sign-in refused: {error}")
        try:
            info = await k8s_session.user_info(self.base_api.as_bearer(token))
        except ApiError as error:
            log.warning("the API server does not accept the provider's ID token: %s", error.message)
            return _refused(403, "the API server does not accept this identity provider's token "
                                 f"({error.status}: {error.message}); see docs/web-view.md for its authentication "
                                 "configuration")
        groups = tuple(str(group) for group in info.get("groups") or [])
        opened = self.sessions.open(user=str(info["username"]), groups=groups, id_token=token,
                                    token_expires=float(claims["exp"]))
        log.info("signed in: %s", opened.user)
        response = web.Response(status=303, headers={"Location": safe_return_path(pending.return_to)})
        response.set_cookie(SESSION_COOKIE, opened.id, path="/", httponly=True, secure=True, samesite="Lax")
        response.del_cookie(LOGIN_COOKIE, path="/", secure=True, samesite="Lax")
        return response

    async def signout(self, request: web.Request) -> web.StreamResponse:
        """Forget the session here (the cookie's id opens nothing from now on) and clear the cookie."""
        self.sessions.end(request.cookies.get(SESSION_COOKIE))
        response = web.json_response({"signedOut": True})
        response.del_cookie(SESSION_COOKIE, path="/", secure=True, samesite="Lax")
        return response

    async def signed_out(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="Signed out of Towline. Close this tab, or sign in again at /.\n")

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(LOGIN_PATH, self.login)
        app.router.add_get(CALLBACK_PATH, self.callback)
        app.router.add_post(SIGNOUT_PATH, self.signout)
        app.router.add_get(SIGNOUT_PATH + "/done", self.signed_out)
        app.router.add_get("/healthz", healthz)


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok\n")


def _refused(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=f"{text}\n")

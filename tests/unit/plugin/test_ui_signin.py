"""The in-cluster web view's door on a real local server: sign-in redirects, sessions, CSRF, sign-out, expiry.

The provider here serves only its discovery document (the sign-in's first step); the whole flow with a real
provider and the API server trusting it is tests/integration/test_web_view_in_cluster.py. No path tested here
reaches the API server: each is decided by the door before a handler runs, or renders a page without a call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import aiohttp
import certifi
import httpx
from aiohttp import web

from towline.k8s.client import KubeApi
from towline.plugin.ui.oidc import Provider, ProviderSettings
from towline.plugin.ui.server import build_app_behind
from towline.plugin.ui.sessions import PendingLogins, Session, SessionStore
from towline.plugin.ui.signin import LOGIN_COOKIE, SESSION_COOKIE, SIGNOUT_PATH, SignInDoor, Site

PUBLIC = "https://towline.example.test"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class View:
    base: str
    door: SignInDoor
    clock: Clock
    issuer: str

    def signed_in(self, user: str = "bob") -> Session:
        return self.door.sessions.open(user=user, groups=(), id_token="id-token-of-" + user,
                                       token_expires=self.clock.now + 3600)


async def _provider_app(issuer_box: list[str]) -> web.Application:
    async def discovery(request: web.Request) -> web.Response:
        issuer = issuer_box[0]
        return web.json_response({"issuer": issuer, "authorization_endpoint": f"{issuer}/oauth2/auth",
                                  "token_endpoint": f"{issuer}/oauth2/token", "jwks_uri": f"{issuer}/jwks",
                                  "code_challenge_methods_supported": ["S256"]})

    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", discovery)
    return app


def _serving(check: Callable[[View, httpx.AsyncClient], Awaitable[None]]) -> None:
    async def run() -> None:
        issuer_box: list[str] = []
        provider_runner = web.AppRunner(await _provider_app(issuer_box))
        await provider_runner.setup()
        await web.TCPSite(provider_runner, "127.0.0.1", 0).start()
        issuer_box.append(f"http://127.0.0.1:{provider_runner.addresses[0][1]}")
        clock = Clock()
        async with aiohttp.ClientSession() as http:
            door = SignInDoor(
                site=Site(public_url=PUBLIC, default_namespace="team"),
                provider=Provider(ProviderSettings(issuer=issuer_box[0], client_id="towline-ui", client_secret="x",
                                                   redirect_uri=f"{PUBLIC}/auth/callback"), http),
                sessions=SessionStore(clock, idle_seconds=60, absolute_seconds=600),
                logins=PendingLogins(clock),
                # No API server answers here: a request that reached one would fail, and none does.
                base_api=KubeApi.without_credentials("https://127.0.0.1:9", certifi.where()))
            app = build_app_behind(door, signout=SIGNOUT_PATH)
            door.add_routes(app)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            try:
                async with httpx.AsyncClient(follow_redirects=False) as client:
                    await check(View(base, door, clock, issuer_box[0]), client)
            finally:
                await runner.cleanup()
                await provider_runner.cleanup()

    asyncio.run(run())


def _cookie(session: Session) -> dict[str, str]:
    return {"Cookie": f"{SESSION_COOKIE}={session.id}"}


def test_a_deep_link_without_a_session_goes_to_sign_in_and_remembers_the_page() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        answer = await client.get(f"{view.base}/ns/team/approvals/close-review")
        assert answer.status_code == 303
        assert answer.headers["Location"] == "/auth/login?next=%2Fns%2Fteam%2Fapprovals%2Fclose-review"

    _serving(check)


def test_sign_in_goes_to_the_provider_with_pkce_and_binds_the_login_to_this_browser() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        answer = await client.get(f"{view.base}/auth/login", params={"next": "/ns/team/approvals/close-review"})
        assert answer.status_code == 303
        location = urlsplit(answer.headers["Location"])
        query = {key: values[0] for key, values in parse_qs(location.query).items()}
        assert f"{location.scheme}://{location.netloc}{location.path}" == f"{view.issuer}/oauth2/auth"
        assert query["code_challenge_method"] == "S256" and query["redirect_uri"] == f"{PUBLIC}/auth/callback"
        assert "openid" in query["scope"].split()
        cookie = answer.headers["Set-Cookie"]
        parts = {part.strip().lower() for part in cookie.split(";")}
        assert cookie.startswith(f"{LOGIN_COOKIE}={query['state']};")
        assert {"httponly", "secure", "samesite=lax", "path=/"} <= parts
        pending = view.door.logins.take(query["state"])
        assert pending is not None and pending.return_to == "/ns/team/approvals/close-review"

    _serving(check)


def test_sign_in_never_returns_the_browser_to_another_site() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        for target in ("https://evil.example/", "//evil.example", "/\\evil.example"):
            answer = await client.get(f"{view.base}/auth/login", params={"next": target})
            state = parse_qs(urlsplit(answer.headers["Location"]).query)["state"][0]
            pending = view.door.logins.take(state)
            assert pending is not None and pending.return_to == "/", target

    _serving(check)


def test_a_callback_for_a_login_this_browser_did_not_start_is_refused() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        # An attacker's own login state, handed to the victim's browser (login CSRF): it lacks the login cookie.
        pending = view.door.logins.start("/")
        answer = await client.get(f"{view.base}/auth/callback", params={"state": pending.state, "code": "c"})
        assert answer.status_code == 400 and "not started by this browser" in answer.text
        assert "set-cookie" not in answer.headers

    _serving(check)


def test_data_without_a_session_is_a_401_naming_the_fix() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        for path in ("/api/workflows", "/ns/team/events/runs", "/ns/team/api/history"):
            answer = await client.get(view.base + path)
            assert answer.status_code == 401 and "sign in again" in answer.json()["message"], path

    _serving(check)


def test_the_page_names_the_session_person_whatever_headers_the_client_sends() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        session = view.signed_in("bob")
        forged = {"X-Forwarded-User": "alice", "X-Remote-User": "alice", "X-Forwarded-Email": "alice@example.test",
                  "Remote-User": "alice", "Authorization": "Bearer alice-token", "Impersonate-User": "alice"}
        page = await client.get(f"{view.base}/ns/team/runs", headers={**_cookie(session), **forged})
        assert page.status_code == 200
        assert "bob · namespace team" in page.text and "alice" not in page.text
        assert f'content="{session.csrf}"' in page.text
        assert 'data-base="/ns/team"' in page.text
        alone = await client.get(f"{view.base}/ns/team/runs", headers=forged)
        assert alone.status_code == 303, "headers alone sign nobody in"

    _serving(check)


def test_a_write_without_the_csrf_token_or_from_another_origin_is_refused() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        session = view.signed_in()
        url = f"{view.base}/ns/team/api/approvals/close-review"
        body = '{"decision":"Approved"}'
        no_token = await client.post(url, content=body, headers={**_cookie(session), "Origin": PUBLIC})
        assert no_token.status_code == 403 and "X-Towline-CSRF" in no_token.text
        wrong = await client.post(url, content=body, headers={**_cookie(session), "Origin": PUBLIC,
                                                               "X-Towline-CSRF": view.signed_in().csrf})
        assert wrong.status_code == 403, "another session's token is not this session's"
        cross = await client.post(url, content=body, headers={**_cookie(session), "Origin": "https://evil.example",
                                                               "X-Towline-CSRF": session.csrf})
        assert cross.status_code == 403 and "Origin" in cross.text
        no_origin = await client.post(url, content=body, headers={**_cookie(session), "X-Towline-CSRF": session.csrf})
        assert no_origin.status_code == 403

    _serving(check)


def test_a_copied_session_cookie_stops_working_after_sign_out() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        session = view.signed_in()
        assert (await client.get(f"{view.base}/runs", headers=_cookie(session))).status_code == 200
        out = await client.post(f"{view.base}{SIGNOUT_PATH}",
                                headers={**_cookie(session), "Origin": PUBLIC, "X-Towline-CSRF": session.csrf})
        assert out.status_code == 200 and f"{SESSION_COOKIE}=\"\"" in out.headers["Set-Cookie"]
        stolen = await client.get(f"{view.base}/runs", headers=_cookie(session))
        assert stolen.status_code == 303 and stolen.headers["Location"].startswith("/auth/login")
        assert view.door.sessions.find(session.id) is None

    _serving(check)


def test_a_copied_session_cookie_stops_working_after_idle_expiry() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        session = view.signed_in()
        view.clock.now += 59
        assert (await client.get(f"{view.base}/runs", headers=_cookie(session))).status_code == 200
        view.clock.now += 60
        stolen = await client.get(f"{view.base}/runs", headers=_cookie(session))
        assert stolen.status_code == 303 and stolen.headers["Location"].startswith("/auth/login")

    _serving(check)


def test_a_namespace_that_is_not_a_name_is_a_400_naming_the_part_to_fix() -> None:
    async def check(view: View, client: httpx.AsyncClient) -> None:
        session = view.signed_in()
        answer = await client.get(f"{view.base}/ns/Team_1/runs", headers=_cookie(session))
        assert answer.status_code == 400 and "/ns/<namespace>/" in answer.text

    _serving(check)

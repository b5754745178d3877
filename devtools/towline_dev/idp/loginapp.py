"""The login and consent app Hydra sends the browser to: a plain HTML form, for the test people only.

`python -m towline_dev.idp.loginapp STATE_DIR` serves `LOGIN_APP_URL` (HTTPS, the provider's certificate):

- `GET /login?login_challenge=...`: the form (user name, password), after asking Hydra that the challenge is live;
- `POST /login`: a right password accepts the login through Hydra's admin API (the subject is the person's name)
  and sends the browser back to Hydra; a wrong one gets the form again with 401 and accepts nothing;
- `GET /consent?consent_challenge=...`: grants what the client asked for, with the person's `groups` and
  `preferred_username` in the ID token, and sends the browser back to Hydra (test people consent to everything);
- `GET /error`: Hydra's error page, its error shown as text;
- `GET /callback`: a plain page for `TEST_REDIRECT_URI` (the code stays in the address, never in the page).

It reaches Hydra's admin API only through the provider's Unix socket (towline_dev.idp.provider).
"""

from __future__ import annotations

import html
import json
import ssl
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from towline_dev.idp.issuer import ISSUER_ADDRESS, LOGIN_APP_PORT

ADMIN: web.AppKey[aiohttp.ClientSession] = web.AppKey("admin", aiohttp.ClientSession)
PEOPLE: web.AppKey[dict[str, dict[str, Any]]] = web.AppKey("people", dict)

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in to the Towline test provider</title></head>
<body><main>
<h1>Sign in</h1>
{notice}
<form method="post" action="/login" id="login">
<input type="hidden" name="login_challenge" value="{challenge}">
<p><label for="username">User name</label>
 <input id="username" name="username" autocomplete="username" value="{user}"></p>
<p><label for="password">Password</label> <input id="password" name="password" type="password"
 autocomplete="current-password"></p>
<p><button type="submit" id="sign-in">Sign in</button></p>
</form>
</main></body></html>
"""


def login_page(challenge: str, *, user: str = "", notice: str = "") -> str:
    """The sign-in form for one login challenge; `notice` (text) above it."""
    shown = f'<p role="alert" id="notice">{html.escape(notice)}</p>' if notice else ""
    return _PAGE.format(challenge=html.escape(challenge, quote=True), user=html.escape(user, quote=True),
                        notice=shown)


async def _admin(request: web.Request, method: str, path: str, challenge: str, body: Any = None) -> tuple[int, Any]:
    async with request.app[ADMIN].request(method, f"http://hydra-admin{path}", params={path_param(path): challenge},
                                          json=body) as response:
        return response.status, await response.json(content_type=None)


def path_param(path: str) -> str:
    """The query parameter Hydra's admin path takes its challenge in."""
    return "consent_challenge" if "/consent" in path else "login_challenge"


async def show_login(request: web.Request) -> web.Response:
    challenge = request.query.get("login_challenge", "")
    status, _ = await _admin(request, "GET", "/admin/oauth2/auth/requests/login", challenge)
    if not challenge or status != 200:
        return web.Response(status=400, text="no live login challenge: start signing in at the app again")
    return web.Response(text=login_page(challenge), content_type="text/html")


async def submit_login(request: web.Request) -> web.Response:
    form = await request.post()
    challenge, user, password = (str(form.get(field, "")) for field in ("login_challenge", "username", "password"))
    person = request.app[PEOPLE].get(user)
    if person is None or not _same(password, str(person["password"])):
        page = login_page(challenge, user=user, notice="Wrong user name or password.")
        return web.Response(status=401, text=page, content_type="text/html")
    status, answer = await _admin(request, "PUT", "/admin/oauth2/auth/requests/login/accept", challenge,
                                  {"subject": user, "remember": False})
    if status != 200:
        return web.Response(status=400, text=f"Hydra refused the login: {answer}")
    raise web.HTTPFound(answer["redirect_to"])


async def consent(request: web.Request) -> web.Response:
    challenge = request.query.get("consent_challenge", "")
    status, asked = await _admin(request, "GET", "/admin/oauth2/auth/requests/consent", challenge)
    if not challenge or status != 200:
        return web.Response(status=400, text="no live consent challenge: start signing in at the app again")
    subject = str(asked["subject"])
    groups = request.app[PEOPLE].get(subject, {}).get("groups", [])
    status, answer = await _admin(request, "PUT", "/admin/oauth2/auth/requests/consent/accept", challenge, {
        "grant_scope": asked.get("requested_scope") or [],
        "grant_access_token_audience": asked.get("requested_access_token_audience") or [],
        "remember": False,
        "session": {"id_token": {"groups": groups, "preferred_username": subject}},
    })
    if status != 200:
        return web.Response(status=400, text=f"Hydra refused the consent: {answer}")
    raise web.HTTPFound(answer["redirect_to"])


async def error(request: web.Request) -> web.Response:
    what = f"{request.query.get('error', 'error')}: {request.query.get('error_description', '')}"
    return web.Response(status=400, text=what)


async def callback(request: web.Request) -> web.Response:
    del request
    return web.Response(text="<!doctype html><title>Signed in</title><p id=signed-in>Signed in.</p>",
                        content_type="text/html")


async def healthz(request: web.Request) -> web.Response:
    del request
    return web.Response(text="ok")


def _same(given: str, expected: str) -> bool:
    import hmac  # noqa: PLC0415 - only here

    return hmac.compare_digest(given.encode(), expected.encode())


def build_app(state_dir: Path) -> web.Application:
    state = json.loads((state_dir / "state.json").read_text())
    app = web.Application()
    app[PEOPLE] = state["people"]

    async def admin_session(app: web.Application) -> Any:
        app[ADMIN] = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=state["admin_socket"]))
        yield
        await app[ADMIN].close()

    app.cleanup_ctx.append(admin_session)
    app.router.add_get("/login", show_login)
    app.router.add_post("/login", submit_login)
    app.router.add_get("/consent", consent)
    app.router.add_get("/error", error)
    app.router.add_get("/callback", callback)
    app.router.add_get("/healthz", healthz)
    return app


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m towline_dev.idp.loginapp STATE_DIR", file=sys.stderr)
        return 2
    state_dir = Path(argv[0])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(state_dir / "tls.crt", state_dir / "tls.key")
    web.run_app(build_app(state_dir), host=ISSUER_ADDRESS, port=LOGIN_APP_PORT, ssl_context=context,
                print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The web view's login on a real local server: the launch code becomes an HttpOnly, SameSite=Strict cookie once.

No API call is made on these paths (the pages' data comes after the session
check), so the server runs here without a cluster; tests/integration/test_web_view.py
does the same through `kubectl towline ui` against the local control plane.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx
from aiohttp import web

from towline.k8s.client import KubeApi
from towline.plugin.ui import guard
from towline.plugin.ui.server import SETTINGS, build_app


async def _serving(check: Any) -> None:
    launch = guard.Launch(asyncio.get_running_loop().time)
    app = build_app(cast(KubeApi, None), namespace="team", user="carol", launch=launch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    app[SETTINGS]["port"] = port
    try:
        await check(f"http://127.0.0.1:{port}", launch, guard.cookie_name(port))
    finally:
        await runner.cleanup()


def test_the_code_sets_an_http_only_strict_cookie_once_and_a_replay_gets_nothing() -> None:
    async def check(base: str, launch: guard.Launch, name: str) -> None:
        url = f"{base}/login?code={launch.code}"
        async with httpx.AsyncClient() as browser, httpx.AsyncClient() as reader:
            opened = await browser.get(url)
            assert opened.status_code == 303 and opened.headers["Location"] == "/runs"
            cookie = opened.headers["Set-Cookie"]
            assert cookie.startswith(f"{name}=")
            assert {"httponly", "samesite=strict", "path=/"} <= {part.strip().lower() for part in cookie.split(";")}
            assert opened.headers["Cache-Control"] == "no-store"
            session = cookie.split(";", 1)[0].split("=", 1)[1]
            assert session not in url and launch.signed_in(session)

            replayed = await reader.get(url)
            assert replayed.status_code == 403 and "already used" in replayed.text
            assert "set-cookie" not in replayed.headers
            assert not launch.signed_in(session), "the replay ended the session the code opened"

    asyncio.run(_serving(check))


def test_a_page_without_the_session_cookie_is_refused() -> None:
    async def check(base: str, launch: guard.Launch, name: str) -> None:
        async with httpx.AsyncClient(cookies={name: launch.code}) as client:  # the code is not a session
            for path in ("/runs", "/events/runs", "/api/workflows", "/"):
                refused = await client.get(f"{base}{path}")
                assert refused.status_code == 403 and "no session" in refused.text, path

    asyncio.run(_serving(check))

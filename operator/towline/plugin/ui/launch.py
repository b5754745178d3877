"""Start the web view on loopback and say where it is; runs until interrupted."""

from __future__ import annotations

import asyncio
import sys
import webbrowser
from collections.abc import Callable

from aiohttp import web

from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin.ui import guard
from towline.plugin.ui.server import SETTINGS, build_app

HOST = "127.0.0.1"


async def serve(api: KubeApi, namespace: str, *, port: int, open_browser: bool, out: Callable[[str], None]) -> int:
    """Bind 127.0.0.1:`port` (0: any free port), print the launch URL, serve until cancelled."""
    user = await session.who_am_i(api)
    token = guard.new_token()
    app = build_app(api, namespace=namespace, user=user, token=token)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port)
    await site.start()
    bound = runner.addresses[0][1]
    app[SETTINGS]["port"] = bound
    url = f"http://{HOST}:{bound}/runs?{guard.TOKEN_PARAMETER}={token}"
    out(f"Towline for {user} in namespace {namespace}: {url}")
    out("Anyone with this URL acts as you until you stop it (Ctrl-C).")
    sys.stdout.flush()  # a wrapper reading our output waits for the URL
    if open_browser:
        webbrowser.open(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
    return 0

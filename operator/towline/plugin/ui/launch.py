"""Start the web view on loopback and say where it is; runs until interrupted."""

from __future__ import annotations

import asyncio
import sys
import time
import webbrowser
from collections.abc import Callable

from aiohttp import web

from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin.deadletters import DEFAULT_OPERATOR_NAMESPACE
from towline.plugin.ui import guard
from towline.plugin.ui.server import SETTINGS, build_app

HOST = "127.0.0.1"


async def serve(api: KubeApi, namespace: str, *, port: int, open_browser: bool, out: Callable[[str], None],
                allow_apply: bool = False, operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE) -> int:
    """Bind 127.0.0.1:`port` (0: any free port), print the launch URL, serve until cancelled."""
    user = await session.who_am_i(api)
    launch = guard.Launch(time.monotonic)
    app = build_app(api, namespace=namespace, user=user, launch=launch, allow_apply=allow_apply,
                    operator_namespace=operator_namespace)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port)
    await site.start()
    bound = runner.addresses[0][1]
    app[SETTINGS]["port"] = bound
    # The URL goes on the browser's command line and into its history: it carries only a code that
    # opens one session, once, within CODE_SECONDS; the session itself lives in an HttpOnly cookie.
    url = f"http://{HOST}:{bound}{guard.LOGIN_PATH}?{guard.CODE_PARAMETER}={launch.code}"
    out(f"Towline for {user} in namespace {namespace}: {url}")
    out(f"The URL works once, within {guard.CODE_SECONDS:.0f} s; the browser that opens it acts as you "
        "until you stop this (Ctrl-C).")
    sys.stdout.flush()  # a wrapper reading our output waits for the URL
    if open_browser:
        webbrowser.open(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
    return 0

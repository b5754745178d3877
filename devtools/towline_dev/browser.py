"""Headless Chromium for the web view's tests, and `kubectl towline ui` run as one person.

Chromium and its WebDriver are Debian's, pinned in versions.BROWSER_TEST_PACKAGES and
installed through debpackages; selenium (pinned in the dev extras) drives them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from towline_dev.debpackages import Progress, ensure_debian_packages
from towline_dev.versions import BROWSER_TEST_PACKAGES

LAUNCH_URL = re.compile(r"(http://127\.0\.0\.1:\d+)/login\?code=([A-Za-z0-9_-]+)")


@contextmanager
def headless_chromium(
    progress: Progress, *, width: int = 1500, height: int = 1000, arguments: Sequence[str] = ()
) -> Iterator[Any]:
    """A selenium WebDriver on Debian's headless Chromium; quit on exit. `arguments`: more command-line flags
    (the test identity provider's `chromium_arguments()`, which make it trust the provider's certificate)."""
    ensure_debian_packages(BROWSER_TEST_PACKAGES, progress, purpose="the web view's browser tests")
    from selenium import webdriver  # noqa: PLC0415 - only the browser tests need selenium
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={width},{height}", "--no-first-run", "--disable-extensions", *arguments):
        options.add_argument(flag)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass(frozen=True)
class WebView:
    """A running `kubectl towline ui`: where it listens, its one-time launch code, its process id, what it printed."""

    base: str
    code: str
    pid: int
    printed: list[str] = field(default_factory=list)
    """Its output after the launch line (both streams), added to the error of a test that fails meanwhile."""

    @property
    def launch_url(self) -> str:
        """The URL it printed: opens a session once (a browser then holds the session cookie)."""
        return f"{self.base}/login?code={self.code}"

    def url(self, path: str) -> str:
        """`path` on this server; a client reaches it once it has opened `launch_url`."""
        return f"{self.base}{path}"

    def sign_in(self, driver: Any) -> None:
        """Open the launch URL in `driver`'s browser: its session cookie serves every later page of this server."""
        driver.get(self.launch_url)


@contextmanager
def web_view(kubeconfig: Path, context: str, namespace: str, *options: str) -> Iterator[WebView]:
    """`kubectl-towline ui` as the kubeconfig context's user, while it runs; `options` are more of its flags
    (`--allow-apply`)."""
    command = [str(Path(sys.executable).parent / "kubectl-towline"), "--kubeconfig", str(kubeconfig),
               "--context", context, "-n", namespace, "ui", "--port", "0", *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = LAUNCH_URL.search(line)
        if found is None:
            process.kill()
            raise RuntimeError(f"`kubectl towline ui` printed no launch URL: {line!r} {process.communicate()[1]}")
        view = WebView(found.group(1), found.group(2), process.pid)
        # Read both pipes to their end while it runs: a pipe nobody reads fills up, and the server then
        # blocks on its next write, serving no page.
        drains = [threading.Thread(target=_drain, args=(stream, view.printed), daemon=True)
                  for stream in (process.stdout, process.stderr) if stream is not None]
        for drain in drains:
            drain.start()
        try:
            yield view
        except BaseException as error:
            if view.printed:
                error.add_note(f"`kubectl towline ui` printed meanwhile: {''.join(view.printed)[-2000:]}")
            raise
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _drain(stream: IO[str], into: list[str]) -> None:
    for line in stream:
        into.append(line)

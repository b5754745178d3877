"""What the web view's browser tests share: finding and waiting on elements of a live page, a write's answer, the
run page's buttons, the page's write token, screenshots, and the failure message that says what the page showed.

Every wait here waits on a fact of the page (an element, a class, a text), reading again when a live update
replaced an element between finding and reading it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from tests.integration.support import list_objects

from towline_dev.browser import WebView
from towline_dev.controlplane import ControlPlane

SCREENSHOTS = Path(__file__).parents[2] / "docs" / "images"


def screenshot(driver: Any, name: str, tmp_path: Path) -> Path:
    """The page as a PNG: into docs/images/ when writing the docs' pictures (TOWLINE_UPDATE_SCREENSHOTS=1), else
    into the test's own directory."""
    directory = SCREENSHOTS if os.environ.get("TOWLINE_UPDATE_SCREENSHOTS") == "1" else tmp_path
    path = directory / name
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, "a screenshot of a drawn page"
    return path


def live_wait(driver: Any, timeout: float, poll: float = 0.2) -> WebDriverWait[Any]:
    """A wait that reads again when the page re-rendered an element between finding and reading it
    (live updates replace a run's row as its phase changes)."""
    return WebDriverWait(driver, timeout, poll_frequency=poll, ignored_exceptions=(StaleElementReferenceException,))


def page_state(driver: Any, *, hidden: tuple[str, ...] = ()) -> str:
    """What the browser shows instead, for a failure message: address, title, the page's text (`hidden` texts,
    such as a test's canary, cut)."""
    text = str(driver.execute_script("return document.body ? document.body.innerText : '(no body)'") or "")
    for secret in hidden:
        text = text.replace(secret, "(canary)")
    return f"the browser is at {driver.current_url.split('?')[0]!r}, title {driver.title!r}, showing: {text[:800]!r}"


def wait_for_element(driver: Any, css: str, what: str, timeout: float = 120, *, hidden: tuple[str, ...] = ()) -> Any:
    """The first element `css` finds, once there is one."""
    try:
        return live_wait(driver, timeout, 0.2).until(
            lambda d: (d.find_elements(By.CSS_SELECTOR, css) or [None])[0], message=f"waiting for {what} ({css})")
    except TimeoutException as error:
        raise AssertionError(f"{what} ({css}) did not appear in {timeout:.0f} s; "
                             f"{page_state(driver, hidden=hidden)}") from error


def offered(driver: Any) -> list[str]:
    """The run page's operation buttons, by their data-action."""
    return [b.get_attribute("data-action") for b in driver.find_elements(By.CSS_SELECTOR, "#run-actions button")]


def until(driver: Any, holds: Callable[[Any], Any], what: str, timeout: float = 60) -> None:
    """Wait until `holds(driver)`; failing, say what the page shows and what its script logged."""
    try:
        live_wait(driver, timeout).until(holds, message=what)
    except TimeoutException as error:
        try:
            logged = [entry.get("message") for entry in driver.get_log("browser")]
        except Exception as reading:
            logged = [f"(no browser log: {reading})"]
        raise AssertionError(f"{what}: not within {timeout:.0f} s; offered {offered(driver)}; {page_state(driver)}; "
                             f"browser log {logged[-10:]}") from error


def result_text(driver: Any, css: str, what: str) -> str:
    """The text of a write's answer once it is no longer `sending…`."""
    box = wait_for_element(driver, css, what)
    live_wait(driver, 60).until(lambda d: d.find_element(By.CSS_SELECTOR, css).get_attribute("class")
                                in ("result done", "result refused"), message=f"the answer of {what}")
    return str(box.text)


def press(driver: Any, action: str) -> str:
    """Press the run page's `action` button; the answer's text."""
    button = wait_for_element(driver, f'#run-actions button[data-action="{action}"]', f"the {action} button", 90)
    button.click()
    return result_text(driver, "#action-result", action)


def runs_of(cluster: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    """The namespace's WorkflowRuns by name, as the API server has them."""
    return {run["metadata"]["name"]: run for run in list_objects(cluster, "workflowruns.towline.dev", namespace)}


def session_of(view: WebView, client: httpx.Client) -> str:
    """Open the view's session in `client` and read the page's write token (as the page's script does)."""
    assert client.get(view.launch_url).status_code == 303
    page = client.get(view.url("/runs"))
    found = re.search(r'<meta name="towline-csrf" content="([^"]+)">', page.text)
    assert found, page.text[:400]
    return found.group(1)

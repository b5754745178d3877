"""A person signing in at the test provider in a real browser (selenium's WebDriver on headless Chromium).

The browser must trust the provider's certificate: start it with `IdentityProvider.chromium_arguments()`.
"""

from __future__ import annotations

from typing import Any


def fill_login_form(driver: Any, name: str, password: str) -> None:
    """On the login app's page the browser shows now: type the user name and password, and submit."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - only the browser tests need selenium

    driver.find_element(By.ID, "username").clear()
    driver.find_element(By.ID, "username").send_keys(name)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.ID, "sign-in").click()

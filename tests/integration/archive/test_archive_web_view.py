"""The web view's History pages in headless Chromium, reading the archive's API through the real API server.

The archive API is registered as registration.py does it (the chart's RBAC, an APIService to a test process
serving an archive held in memory); three people run their own `kubectl towline ui`: alice may read the
namespace's runs and pods' logs, carol its runs only, bob neither. What each page shows is what the API server and
the archive let that person read.

Exclusive: an APIService is cluster-wide."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from tests.archivereader import T0, MemoryArchive, archived_run, log_entry
from tests.integration.archive.registration import registered_archive_api

from towline.archive.records import ArchivedRun
from towline_dev.browser import headless_chromium, web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.kubeconfig import context_name
from towline_dev.node.realnode import NodeCluster

pytestmark = [pytest.mark.exclusive, pytest.mark.integration]

def gated_run(namespace: str) -> ArchivedRun:
    """deploy-prod-1 as the archive keeps a run that passed a gate: its workflow copy, step states, the Approval."""
    run = archived_run(namespace, "deploy-prod-1", seq=1, approvers=("bob",), requester="carol")
    kept: Any = run.entry.body["run"]
    kept["status"] = {
        "phase": "Succeeded", "startedAt": "2025-07-01T08:00:00Z", "finishedAt": "2025-07-01T08:03:00Z",
        "workflowSpec": {"steps": [
            {"id": "review", "approval": {"message": "Apply <release>?"}},
            {"id": "apply", "needs": ["review"], "action": "http.request", "with": {"url": "https://cd.example"}},
        ]},
        "steps": [{"id": "review", "phase": "Succeeded", "approvalName": "deploy-prod-1-review", "decidedBy": "bob"},
                  {"id": "apply", "phase": "Succeeded", "attempt": 1}],
    }
    run.entry.body["approvals"] = [{
        "metadata": {"name": "deploy-prod-1-review"},
        "spec": {"runName": "deploy-prod-1", "step": "review", "message": "Apply <release>?", "decision": "Approved",
                 "decidedBy": "bob", "reason": "change CHG-7 <approved>"},
        "status": {"phase": "Approved", "decidedAt": "2025-07-01T08:02:00Z"}}]
    run.entry.body["logs"] = [{"key": "k", "digest": "d", "step": "apply", "attempt": 1, "container": "step",
                               "truncated": False}]
    return run


def the_archive(namespace: str) -> MemoryArchive:
    archive = MemoryArchive()
    run = gated_run(namespace)
    archive.add(run, log_entry(namespace, run, "apply", "applied 3 objects <ok>\n", seq=2))
    archive.add(archived_run(namespace, "deploy-prod-2", seq=4, phase="Failed",
                             started=T0 + datetime.timedelta(days=1)))
    return archive


@pytest.fixture(scope="module")
def registered(real_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, str]]:
    plane = real_node.plane
    assert plane is not None
    with registered_archive_api(plane, tmp_path_factory.mktemp("archive-web"), "t-archive-web", the_archive) as api:
        yield plane, api.namespace


def waiting(driver: Any, timeout: float = 60) -> WebDriverWait[Any]:
    return WebDriverWait(driver, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,))


def text_of(driver: Any, css: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return str(found[0].text) if found else ""


def test_history_shows_each_person_what_the_archive_lets_them_read(registered: tuple[ControlPlane, str]) -> None:
    plane, namespace = registered
    with headless_chromium(print) as driver:
        with web_view(plane.kubeconfig, context_name("alice"), namespace) as view:
            view.sign_in(driver)
            driver.get(view.url("/history"))
            waiting(driver).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#history tbody tr")) == 2)
            rows = driver.find_elements(By.CSS_SELECTOR, "#history tbody tr")
            assert [row.get_attribute("data-run") for row in rows] == ["deploy-prod-2", "deploy-prod-1"]
            assert "bob" in rows[1].text and "carol" in rows[1].text

            driver.get(view.url("/history?phase=Failed"))
            waiting(driver).until(lambda d: [r.get_attribute("data-run") for r in d.find_elements(
                By.CSS_SELECTOR, "#history tbody tr")] == ["deploy-prod-2"])

            driver.get(view.url("/history/deploy-prod-1?step=apply"))
            waiting(driver).until(lambda d: "applied 3 objects <ok>" in text_of(d, "#logs"))
            assert {node.get_attribute("data-step"): node.get_attribute("data-phase") for node in
                    driver.find_elements(By.CSS_SELECTOR, "#graph g.node")} == {
                "review": "Succeeded", "apply": "Succeeded"}
            approval = text_of(driver, '#archived-approvals tr[data-approval="deploy-prod-1-review"]')
            assert "bob" in approval and "change CHG-7 <approved>" in approval, approval
            assert not driver.find_elements(By.CSS_SELECTOR, "#archived-approvals approved"), "text, not markup"

        with web_view(plane.kubeconfig, context_name("carol"), namespace) as view:
            view.sign_in(driver)
            driver.get(view.url("/history/deploy-prod-1?step=apply"))
            waiting(driver).until(lambda d: "get pods/log" in text_of(d, "#logs"))
            assert "applied 3 objects" not in text_of(driver, "#logs")

        with web_view(plane.kubeconfig, context_name("bob"), namespace) as view:
            view.sign_in(driver)
            driver.get(view.url("/history"))
            waiting(driver).until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-problem="forbidden"]'))
            refusal = text_of(driver, '[data-problem="forbidden"]')
            assert "bob may not list archived runs" in refusal and "list workflowruns (towline.dev)" in refusal
            assert not driver.find_elements(By.CSS_SELECTOR, "#history"), "no table of runs bob may not see"

"""The web view's Dead letters page in a real browser (headless Chromium) against the real API server and operator:
alice, the namespace's Towline admin, finds it in the nav, sees carol's run that failed before its first step, and
replays it with the Replay button, as herself; carol, who may start runs but holds no admin role, has no nav link,
sees the API server's refusal of the list, and her replay (HTTP, with her session and the page's token) is refused by
the API server's admission policy in its own words. Each person runs their own `kubectl towline ui`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from tests.integration.browsersupport import result_text, screenshot, session_of, until, wait_for_element
from tests.integration.letterssupport import RUNS, early_run, orders
from tests.integration.support import apply, bind_role, list_objects, wait_for_phase

from towline.k8s.deliveryletters import REPLAY_OF_ANNOTATION, REPLAYED_BY_ANNOTATION
from towline_dev.browser import web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration]



@pytest.fixture
def letters_namespace(towline_installed: ControlPlane, shown_namespace: str) -> str:
    """alice: runner and Towline admin of the namespace; carol: runner only. carol's run of Workflow orders, made
    before the Workflow was, failed before its first step."""
    cluster, namespace = towline_installed, shown_namespace
    bind_role(cluster, namespace, "towline-runner", users=("alice", "carol"))
    bind_role(cluster, namespace, "towline-admin", users=("alice",))
    cluster.kubectl("create", "secret", "generic", "crm-api", "-n", namespace, "--from-literal=token=unused")
    return namespace


def test_alice_replays_a_failed_run_from_the_page_and_carol_gets_the_api_servers_refusals(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, letters_namespace: str, chromium: Any,
    tmp_path: Path,
) -> None:
    cluster, ns, browser = towline_installed, letters_namespace, chromium
    early_run(cluster, ns, "early", requester="carol")
    apply(cluster, orders(ns))
    with web_view(cluster.kubeconfig, context_name("alice"), ns) as alice, \
            web_view(cluster.kubeconfig, context_name("carol"), ns) as carol, \
            web_view(cluster.kubeconfig, context_name("carol"), ns) as carols_other, httpx.Client() as carols_client:
        alice.sign_in(browser)
        browser.get(alice.url("/runs"))
        wait_for_element(browser, "#nav-deadletters", "the nav's Dead letters link").click()
        row = wait_for_element(browser, 'tr[data-letter="early"][data-kind="run"]', "carol's failed run")
        assert "orders/manual" in row.text and "does not exist" in row.text, row.text
        row.find_element(By.CSS_SELECTOR, 'button[data-replay="early"]').click()
        answer = result_text(browser, '[data-result-for="early"]', "the replay")
        assert "replayed by alice as run" in answer, answer
        [replay] = [run for run in list_objects(cluster, RUNS, ns) if run["metadata"]["name"] != "early"]
        annotations = replay["metadata"]["annotations"]
        assert (annotations[REPLAYED_BY_ANNOTATION], annotations[REPLAY_OF_ANNOTATION]) == \
            ("alice", "workflowruns/early")
        assert replay["spec"]["requestedBy"] == "alice" and replay["spec"]["params"] == {"region": "emea"}
        wait_for_phase(cluster, ns, replay["metadata"]["name"], {"AwaitingApproval"})
        browser.get(alice.url(f"/ns/{ns}/deadletters"))
        until(browser, lambda d: replay["metadata"]["name"] in d.find_element(
            By.CSS_SELECTOR, 'tr[data-letter="early"]').text, "the letter names its replay")
        assert browser.find_elements(By.CSS_SELECTOR, 'button[data-replay="early"]') == [], "replayed once"
        screenshot(browser, "web-view-dead-letters.png", tmp_path)

        carol.sign_in(browser)
        browser.get(carol.url(f"/ns/{ns}/deadletters"))
        refused = wait_for_element(browser, "#deadletters-refused", "the refusal of carol's list")
        assert "refused (403)" in refused.text and "carol" in refused.text, refused.text
        assert browser.find_elements(By.CSS_SELECTOR, "#nav-deadletters") == [], "no link for carol"

        # carol may create runs and read early: the page's replay, as her, is the admission policy's to refuse.
        # (Her second view: a launch code opens one session, and her browser holds the first view's.)
        token = session_of(carols_other, carols_client)
        second = early_run(cluster, ns, "early-2", requester="carol", params={})
        assert "region" in second["status"]["message"], second["status"]
        refusal = carols_client.post(carols_other.url(f"/ns/{ns}/api/deadletters/early-2/replay"),
                                     headers={"Origin": carols_other.base, "X-Towline-CSRF": token})
        assert refusal.status_code == 403, refusal.text
        assert "carol may not replay dead letters" in refusal.json()["message"], refusal.text
        assert len(list_objects(cluster, RUNS, ns)) == 3, "nothing was created for carol"

"""The web view's Dead letters page shows the events sink's own letters, in a real browser (headless Chromium) against
the real API server and an operator whose sink is a receiver in the test hosts' network: the cluster admin sees two
undelivered events kept in the operator's namespace and replays one with its Replay button; the operator sends it,
once, and the other stays. carol, the team namespace's editor (Kubernetes' `edit`), gets no events section, and her
direct GET and POSTs of the page's JSON are refused by the API server (403, saying what it takes), writing nothing.
Each person runs their own `kubectl towline ui`, whose `--operator-namespace` default is the test operator's."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from tests.integration.browsersupport import result_text, session_of, until, wait_for_element
from tests.integration.eventsinksupport import operator_with_sink
from tests.integration.ingress_support import new_whsec
from tests.integration.support import ScriptedServer, bind_role, get, wait_for

from towline.api.events import DeadLetter
from towline.k8s.client import KubeApi
from towline.k8s.deadletters import DEAD_LETTERS_CONFIG_MAP, REPLAY_ANNOTATION, ConfigMapDeadLetters
from towline_dev.browser import web_view
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_NAMESPACE, OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]


def undelivered(namespace: str, run: str) -> DeadLetter:
    """A run's event as the sink keeps it after its receiver answered 503 three times."""
    event = {"specversion": "1.0", "id": uuid.uuid4().hex, "source": f"/namespaces/{namespace}/workflows/orders",
             "type": "dev.towline.run.failed", "subject": f"workflowruns/{run}", "time": "2026-12-07T08:03:10Z",
             "datacontenttype": "application/json",
             "data": {"namespace": namespace, "workflow": "orders", "run": run, "phase": "Failed"}}
    return DeadLetter(event=event, attempts=3, error="transient: POST events failed with HTTP 503",
                      failed_at="2026-12-07T08:03:10Z")


def keep_as_the_operator(operator: OperatorProcess, letters: list[DeadLetter]) -> None:
    """Keep the letters as the operator's sink keeps one it could not deliver: its own store, as its identity."""
    async def main() -> None:
        api = await KubeApi.connect(str(operator.kubeconfig))
        try:
            for letter in letters:
                await ConfigMapDeadLetters(api, operator.namespace).keep(letter)
        finally:
            await api.close()
    asyncio.run(main())


def kept(cluster: ControlPlane) -> dict[str, Any]:
    config_map = get(cluster, "configmaps", DEAD_LETTERS_CONFIG_MAP, OPERATOR_NAMESPACE)
    assert config_map is not None
    return config_map


def test_an_admin_replays_an_undelivered_event_from_the_page_and_a_team_editor_is_refused_it(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str, chromium: Any,
    tmp_path: Path,
) -> None:
    cluster, ns, browser = towline_installed, namespace, chromium
    bind_role(cluster, ns, "edit", users=("carol",))
    first, second = undelivered(ns, "orders-a"), undelivered(ns, "orders-b")
    with ScriptedServer() as servers:
        sink = servers.script("/events", (202, b"", {}))
        with operator_with_sink(towline_operator, tmp_path, f"{servers.url}/events", new_whsec()) as sinking:
            keep_as_the_operator(sinking, [first, second])
            with web_view(cluster.kubeconfig, context_name("admin"), ns) as admin, \
                    web_view(cluster.kubeconfig, context_name("carol"), ns) as carol, \
                    web_view(cluster.kubeconfig, context_name("carol"), ns) as carols_other, \
                    httpx.Client() as carols_client:
                admin.sign_in(browser)
                browser.get(admin.url("/runs"))
                wait_for_element(browser, "#nav-deadletters", "the nav's Dead letters link").click()
                row = wait_for_element(browser, f'tr[data-event-letter="{first.id}"]', "the undelivered event")
                assert "dev.towline.run.failed" in row.text and "HTTP 503" in row.text, row.text
                assert f"kept in {OPERATOR_NAMESPACE}" in browser.find_element(By.CSS_SELECTOR, "#eventletters").text
                row.find_element(By.CSS_SELECTOR, f'button[data-replay-event="{first.id}"]').click()
                answer = result_text(browser, f'[data-event-result-for="{first.id}"]', "the replay")
                assert f"1 dead letter(s) handed to the operator to send again: {first.id}" in answer, answer
                wait_for("the operator to send the replayed event", lambda: [
                    request for request in sink.requests if request["headers"]["webhook-id"] == first.id])
                wait_for("the operator to take the letter out", lambda: first.id not in kept(cluster)["data"])
                browser.get(admin.url(f"/ns/{ns}/deadletters"))
                wait_for_element(browser, f'tr[data-event-letter="{second.id}"]', "the letter not replayed")
                until(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, f'tr[data-event-letter="{first.id}"]'),
                      "the replayed letter no longer listed")

                carol.sign_in(browser)
                browser.get(carol.url(f"/ns/{ns}/deadletters"))
                wait_for_element(browser, "#deadletters-empty, #deadletters-refused", "carol's namespace letters")
                assert browser.find_elements(By.CSS_SELECTOR, "#eventletters") == [], "no events section for carol"

                # Her own session (a launch code opens one), asking the page's JSON directly.
                token = session_of(carols_other, carols_client)
                before = kept(cluster)["metadata"]["resourceVersion"]
                listed = carols_client.get(carols_other.url(f"/ns/{ns}/api/eventletters"))
                assert listed.status_code == 403, listed.text
                assert "not yours to read" in listed.json()["message"], listed.text
                assert 'User "carol" cannot get resource "configmaps"' in listed.json()["message"], listed.text
                for path in (f"/api/eventletters/{second.id}/replay", "/api/eventletters/replay"):
                    refused = carols_client.post(carols_other.url(path),
                                                 headers={"Origin": carols_other.base, "X-Towline-CSRF": token})
                    assert refused.status_code == 403 and "not yours to replay" in refused.json()["message"], \
                        refused.text
                after = kept(cluster)
                assert after["metadata"]["resourceVersion"] == before, "carol wrote nothing"
                assert REPLAY_ANNOTATION not in (after["metadata"].get("annotations") or {})
                assert second.id in after["data"]
    received = Counter(request["headers"]["webhook-id"] for request in sink.requests)
    assert received == Counter({first.id: 1}), "the replayed event once, with its own id; the other not at all"

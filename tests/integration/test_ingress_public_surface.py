"""What an anonymous caller of the public port learns: nothing about which Workflows and triggers exist.

Attack: probe `/hooks/NAMESPACE/WORKFLOW/TRIGGER` paths without a signature to
map a cluster's automation (which workflows exist, their trigger names,
whether a Workflow is broken and why), and read `/metrics` and `/readyz` for
the rest. Every path that is not a usable webhook trigger answers the same
bytes; the admin endpoints are on another port.
"""

from __future__ import annotations

import httpx
import pytest
from tests.integration.ingress_support import (
    hook_url,
    ingress,
    post,
    refusal,
    signed_standard,
    signed_trigger,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply

from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

BODY = b'{"probe": true}'
PLAIN = {"Content-Type": "application/json"}


def test_every_path_that_is_not_a_usable_trigger_answers_the_same_404(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str,
) -> None:
    signed_trigger(towline_installed, ingress, namespace, "billing")
    scheduled = webhook_workflow("nightly", namespace, {})
    scheduled["spec"]["triggers"] = [{"name": "cron_trigger", "schedule": {"cron": "0 3 * * *"}}]
    apply(towline_installed, scheduled)
    broken = webhook_workflow("broken", namespace, {"verify": {"scheme": "github",
                                                               "secretRef": {"name": "k", "key": "k"}},
                                                    "data": {"v": "params.version"}})
    apply(towline_installed, broken)
    wait_until_cached(ingress, namespace, "broken", log_marker=f"Workflow {namespace}/broken is not valid")
    wait_until_cached(ingress, namespace, "nightly", "cron_trigger",
                      log_marker=f"Workflow {namespace}/nightly has no webhook or cloudEvent trigger")

    probes = {
        "no such workflow": hook_url(ingress, namespace, "payroll"),
        "no such trigger": hook_url(ingress, namespace, "billing", "refund"),
        "a schedule trigger": hook_url(ingress, namespace, "nightly", "cron_trigger"),
        "an invalid Workflow": hook_url(ingress, namespace, "broken"),
        "no such namespace": hook_url(ingress, f"{namespace}-none", "billing"),
    }
    answers = {what: post(url, BODY, PLAIN) for what, url in probes.items()}
    assert {a.status_code for a in answers.values()} == {404}, {w: a.text for w, a in answers.items()}
    assert len({a.content for a in answers.values()}) == 1, {w: a.text for w, a in answers.items()}
    answer = next(iter(answers.values())).text
    for leak in (namespace, "billing", "payroll", "refund", "cron_trigger", "params.version", "webhook triggers"):
        assert leak not in answer
    assert "webhook.data.v" in ingress.log_text(), "the author still finds the reason in the ingress's log"


def test_health_readiness_and_metrics_are_not_on_the_public_port(
    towline_installed: ControlPlane, ingress: IngressProcess,
) -> None:
    for path in ("/metrics", "/readyz", "/healthz"):
        public = httpx.get(f"{ingress.url}{path}", timeout=10)
        assert public.status_code == 404, (path, public.text)
        assert "towline_webhook" not in public.text and "workflows" not in public.text
        assert httpx.get(f"{ingress.admin_url}{path}", timeout=10).status_code == 200
    assert "towline_webhook_deliveries_total" in httpx.get(f"{ingress.admin_url}/metrics", timeout=10).text


def test_a_signed_delivery_still_learns_why_its_mapping_failed(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str,
) -> None:
    """The uniform answer is for callers who have not shown a signature; a verified sender learns why (422)."""
    url, secret = signed_trigger(towline_installed, ingress, namespace, "billing", data={"n": "int(body.kind)"})
    unsigned = post(url, b'{"kind": "x"}', PLAIN)
    assert unsigned.status_code == 401, unsigned.text
    body = b'{"kind": "x"}'
    signed = post(url, body, signed_standard(secret, body))
    assert signed.status_code == 422 and refusal(signed)["reason"] == "DataMappingFailed", signed.text

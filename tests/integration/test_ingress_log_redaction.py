"""A signing key never reaches the ingress's log, even on a path that would print it.

Attack: a sender (misconfigured, or probing) puts the trigger's signing secret
in a header the trigger's filter reads. The filter fails on it, and CEL's error
quotes the value; the refusal is logged. The ingress registers every key it reads
with the log redactor, so the line says [REDACTED] where the key would be, in
every form the key takes (as stored, as text, the base64 inside whsec_).
"""

from __future__ import annotations

import base64

import pytest
from tests.integration.ingress_support import (
    another_namespace,
    create_secret,
    hook_url,
    ingress,
    new_whsec,
    opt_in,
    post,
    refusal,
    signed_standard,
    signed_trigger,
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply, wait_for

from towline.triggers.ingress import sign
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]


def test_a_signing_key_echoed_by_a_failing_filter_is_redacted_from_the_log(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str,
) -> None:
    secret = new_whsec()
    create_secret(towline_installed, namespace, "echo-secret", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "echo-secret")
    # duration() of a string that is not a duration fails with an error that quotes the string.
    webhook = standard_webhook("echo-secret", filter='duration(headers["x-echo"]) > duration("1s")')
    apply(towline_installed, webhook_workflow("echo", namespace, webhook))
    wait_until_cached(ingress, namespace, "echo")

    body = b'{"n": 1}'
    response = post(hook_url(ingress, namespace, "echo"), body, {**signed_standard(secret, body), "X-Echo": secret})
    assert response.status_code == 422, response.text
    assert refusal(response)["reason"] == "FilterFailed"
    assert secret in response.text, "the sender sent the value itself; the error quotes it back to the sender only"

    marker = f"delivery to {namespace}/echo/hook refused: 422 FilterFailed"
    wait_for("the refusal in the ingress log", lambda: marker in ingress.log_text(), timeout=30, interval=0.1)
    line = next(line for line in ingress.log_text().splitlines() if marker in line)
    assert "[REDACTED]" in line, line
    key_body = secret.removeprefix("whsec_")
    for form in (secret, key_body, base64.b64encode(secret.encode()).decode()):
        assert form not in ingress.log_text()


def test_one_tenants_short_or_unused_secret_values_never_blank_another_tenants_log_lines(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str,
) -> None:
    """Attack: tenant A grants the ingress a Secret that, besides its signing key, holds `payroll` (tenant B's
    workflow), and names a second Secret whose key is a short word. The redactor is process-wide: had the
    ingress registered those values, B's log lines would say [REDACTED] where they name B's workflow."""
    key = new_whsec()
    create_secret(towline_installed, namespace, "a-key", {"signing-secret": key, "decoy": "payroll"})
    create_secret(towline_installed, namespace, "a-short", {"signing-secret": "payroll-nightly"})  # 15 bytes
    opt_in(towline_installed, namespace, "a-key", "a-short")
    apply(towline_installed, webhook_workflow("tenant-a", namespace, standard_webhook("a-key")))
    apply(towline_installed, webhook_workflow("tenant-a-short", namespace, {"verify": {
        "scheme": "github", "secretRef": {"name": "a-short", "key": "signing-secret"}}}))
    wait_until_cached(ingress, namespace, "tenant-a")
    wait_until_cached(ingress, namespace, "tenant-a-short")
    body = b'{"n": 1}'
    assert post(hook_url(ingress, namespace, "tenant-a"), body, signed_standard(key, body)).status_code == 202
    short = post(hook_url(ingress, namespace, "tenant-a-short"), body,
                 {"Content-Type": "application/json", **sign.github_headers(b"payroll-nightly", body)})
    assert short.status_code == 503 and refusal(short)["reason"] == "SigningKeyUnavailable", short.text
    assert "payroll-nightly" not in short.text
    wait_for("the short key's problem in the log", lambda: "fewer than 16 bytes" in ingress.log_text(), timeout=30,
             interval=0.1)

    with another_namespace(towline_installed, namespace, "b") as tenant_b:
        url, b_key = signed_trigger(towline_installed, ingress, tenant_b, "payroll")
        accepted = post(url, body, signed_standard(b_key, body))
        assert accepted.status_code == 202, accepted.text
        marker = f"delivery to {tenant_b}/payroll/hook: 202 run created (payroll-hook-"
        wait_for("B's delivery in the ingress log, naming B's workflow", lambda: marker in ingress.log_text(),
                 timeout=30, interval=0.1)
    assert "payroll-nightly" not in ingress.log_text()

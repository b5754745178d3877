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
    create_secret,
    hook_url,
    ingress,
    new_whsec,
    opt_in,
    post,
    refusal,
    signed_standard,
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply, wait_for

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

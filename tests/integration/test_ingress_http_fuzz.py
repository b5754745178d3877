"""Fuzzing the ingress over HTTP: random paths, headers, content types and bodies never get a 5xx, and
nothing without a valid signature ever becomes a WorkflowRun."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.ingress_support import (
    create_secret,
    ingress,
    new_whsec,
    opt_in,
    runs,
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply

from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

HEADER_VALUE = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=100)
SIGNATURES = st.lists(
    st.tuples(st.sampled_from(["v1", "v1a", "v2"]), st.binary(max_size=64)).map(
        lambda t: f"{t[0]},{base64.b64encode(t[1]).decode()}"),
    max_size=10,
).map(" ".join)


@pytest.fixture(scope="module")
def target(towline_installed: ControlPlane, ingress: IngressProcess) -> Iterator[tuple[str, str]]:
    namespace = f"ingress-fuzz-{secrets.token_hex(3)}"
    towline_installed.kubectl("create", "namespace", namespace)
    create_secret(towline_installed, namespace, "hook-secret", {"signing-secret": new_whsec()})
    opt_in(towline_installed, namespace, "hook-secret")
    apply(towline_installed, webhook_workflow("fuzzed", namespace, standard_webhook(
        data={"id": "body.id"}, maxBodyBytes=2048, rateLimitPerMinute=100000)))
    wait_until_cached(ingress, namespace, "fuzzed")
    yield namespace, ingress.url
    towline_installed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(
    workflow=st.sampled_from(["fuzzed", "fuzzed", "missing", "FUZZED", "a" * 300]),
    trigger=st.sampled_from(["hook", "hook", "other", "hook%2F..", "_"]),
    content_type=st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain",
                                  "application/x-www-form-urlencoded", "", "multipart/form-data; boundary=x"]),
    headers=st.dictionaries(st.sampled_from(["webhook-id", "webhook-timestamp", "x-hub-signature-256",
                                             "authorization", "content-encoding", "x-anything"]),
                            HEADER_VALUE, max_size=6),
    signature=st.one_of(st.none(), SIGNATURES),
    stamp_offset=st.one_of(st.none(), st.integers(-10**6, 10**6)),
    body=st.one_of(st.binary(max_size=3000), st.just(b'{"id": "x"}')),
)
def test_random_requests_never_5xx_and_never_start_a_run(
    towline_installed: ControlPlane, target: tuple[str, str], workflow: str, trigger: str, content_type: str,
    headers: dict[str, str], signature: str | None, stamp_offset: int | None, body: bytes,
) -> None:
    namespace, base = target
    sent = dict(headers)
    if content_type:
        sent["Content-Type"] = content_type
    if signature is not None:
        sent["webhook-signature"] = signature
    if stamp_offset is not None:
        sent["webhook-timestamp"] = str(int(time.time()) + stamp_offset)
    response = httpx.post(f"{base}/hooks/{namespace}/{workflow}/{trigger}", content=body, headers=sent, timeout=30)
    assert response.status_code < 500, response.text
    assert response.status_code != 202 and response.status_code != 200, response.text


def test_after_fuzzing_no_run_exists(towline_installed: ControlPlane, target: tuple[str, str]) -> None:
    assert runs(towline_installed, target[0]) == []

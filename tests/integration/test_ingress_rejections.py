"""Every way a delivery is refused: the status, a body that says why, and no WorkflowRun created.

Deliveries go over loopback HTTP to a real `towline ingress` process that runs as
the chart's ingress ServiceAccount against the real local control plane.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.ingress_support import (
    create_secret,
    hook_url,
    ingress,
    ingress_gauge,
    new_whsec,
    opt_in,
    post,
    refusal,
    runs,
    signed_standard,
    standard_webhook,
    wait_until_cached,
    webhook_workflow,
)
from tests.integration.support import apply, wait_for

from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP
from towline.triggers.ingress import sign
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import INGRESS_SERVICE_ACCOUNT, IngressProcess
from towline_dev.install import OPERATOR_NAMESPACE, OperatorProcess, operator_kubeconfig

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

BODY = b'{"order": {"id": "A-1"}}'


@pytest.fixture
def signed_hook(towline_installed: ControlPlane, ingress: IngressProcess, namespace: str) -> tuple[str, str]:
    """A Workflow `shop` with a standard-webhooks trigger whose Secret the namespace granted; (url, secret)."""
    secret = new_whsec()
    create_secret(towline_installed, namespace, "hook-secret", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "hook-secret")
    apply(towline_installed, webhook_workflow("shop", namespace, standard_webhook(rateLimitPerMinute=2,
                                                                                 maxBodyBytes=1024)))
    wait_until_cached(ingress, namespace, "shop")
    return hook_url(ingress, namespace, "shop"), secret


def assert_refused(cluster: ControlPlane, namespace: str, response: object, status: int, reason: str,
                   words: str) -> None:
    import httpx  # noqa: PLC0415

    assert isinstance(response, httpx.Response)
    body = refusal(response)
    assert response.status_code == status, response.text
    assert body["reason"] == reason, body
    assert words in body["message"], body
    assert runs(cluster, namespace) == []


def test_bad_signature_is_401_and_creates_nothing(
    towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str]
) -> None:
    url, _ = signed_hook
    response = post(url, BODY, signed_standard(new_whsec(), BODY))
    assert_refused(towline_installed, namespace, response, 401, "Unauthorized", "none of the 1 signature(s)")


def test_signature_over_another_body_is_401(
    towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str]
) -> None:
    url, secret = signed_hook
    response = post(url, BODY.replace(b"A-1", b"A-2"), signed_standard(secret, BODY))
    assert_refused(towline_installed, namespace, response, 401, "Unauthorized", "matches")


@pytest.mark.parametrize(("offset", "words"), [(-3600, "s old"), (3600, "in the future")])
def test_stale_or_future_timestamp_is_401(
    towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str], offset: int, words: str
) -> None:
    url, secret = signed_hook
    response = post(url, BODY, signed_standard(secret, BODY, at=time.time() + offset))
    assert_refused(towline_installed, namespace, response, 401, "Unauthorized", words)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_signature_headers_are_401(
    towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str], missing: str
) -> None:
    url, secret = signed_hook
    headers = signed_standard(secret, BODY)
    del headers[missing]
    assert_refused(towline_installed, namespace, post(url, BODY, headers), 401, "Unauthorized", missing)


def test_oversized_body_is_413(towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str]) -> None:
    url, secret = signed_hook
    big = b'{"pad": "' + b"x" * 2000 + b'"}'
    response = post(url, big, signed_standard(secret, big))
    assert_refused(towline_installed, namespace, response, 413, "BodyTooLarge", "maxBodyBytes (1024)")


def test_oversized_chunked_body_without_length_is_413(
    towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str]
) -> None:
    import httpx  # noqa: PLC0415

    url, secret = signed_hook
    big = b'{"pad": "' + b"x" * 5000 + b'"}'

    def chunks():  # type: ignore[no-untyped-def]
        for start in range(0, len(big), 500):
            yield big[start:start + 500]

    response = httpx.post(url, content=chunks(), headers=signed_standard(secret, big), timeout=30)
    assert_refused(towline_installed, namespace, response, 413, "BodyTooLarge", "maxBodyBytes")


def test_wrong_content_type_is_415(
    towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str]
) -> None:
    url, secret = signed_hook
    headers = {**signed_standard(secret, BODY), "Content-Type": "application/xml"}
    assert_refused(towline_installed, namespace, post(url, BODY, headers), 415, "UnsupportedContentType",
                   "accepts application/json")


def test_compressed_body_is_415(towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str]) -> None:
    url, secret = signed_hook
    headers = {**signed_standard(secret, BODY), "Content-Encoding": "gzip"}
    assert_refused(towline_installed, namespace, post(url, BODY, headers), 415, "UnsupportedEncoding", "gzip")


def test_a_suspended_workflow_is_409_to_a_signed_delivery_only(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    secret = new_whsec()
    create_secret(towline_installed, namespace, "hook-secret", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "hook-secret")
    apply(towline_installed, webhook_workflow("paused", namespace, standard_webhook(), suspend=True))
    wait_until_cached(ingress, namespace, "paused")
    url = hook_url(ingress, namespace, "paused")
    assert_refused(towline_installed, namespace, post(url, BODY, signed_standard(new_whsec(), BODY)), 401,
                   "Unauthorized", "matches")
    assert_refused(towline_installed, namespace, post(url, BODY, signed_standard(secret, BODY)), 409, "Suspended",
                   "spec.suspend: true")


def test_rate_limit_is_429_with_retry_after(
    towline_installed: ControlPlane, namespace: str, signed_hook: tuple[str, str]
) -> None:
    url, secret = signed_hook
    statuses = [post(url, BODY, signed_standard(secret, BODY)).status_code for _ in range(2)]
    assert statuses == [202, 202]
    response = post(url, BODY, signed_standard(secret, BODY))
    assert response.status_code == 429, response.text
    assert refusal(response)["reason"] == "RateLimited"
    assert "rateLimitPerMinute" in refusal(response)["message"]
    assert 1 <= int(response.headers["Retry-After"]) <= 30
    assert len(runs(towline_installed, namespace)) == 2


def test_unsigned_trigger_without_opt_in_cannot_even_be_applied(
    towline_installed: ControlPlane, namespace: str
) -> None:
    result = apply(towline_installed, webhook_workflow("open", namespace, {"verify": {"scheme": "none"}}),
                   user="admin", check=False)
    assert result.returncode != 0
    assert "set allowUnsigned: true to mean it" in result.stderr


def test_filtered_delivery_is_202_filtered_and_starts_nothing(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    secret = new_whsec()
    create_secret(towline_installed, namespace, "hook-secret", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "hook-secret")
    apply(towline_installed, webhook_workflow("picky", namespace, standard_webhook(filter="body.type == 'paid'")))
    wait_until_cached(ingress, namespace, "picky")
    body = b'{"type": "refunded"}'
    response = post(hook_url(ingress, namespace, "picky"), body, signed_standard(secret, body))
    assert response.status_code == 202
    assert refusal(response)["message"].startswith("filtered")
    assert runs(towline_installed, namespace) == []


def test_secret_not_granted_to_the_ingress_is_503_and_unreadable(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    """A Workflow naming a Secret the namespace did not grant: the ingress cannot read it, and says so."""
    create_secret(towline_installed, namespace, "hook-secret", {"signing-secret": new_whsec()})
    create_secret(towline_installed, namespace, "db-password", {"signing-secret": new_whsec()})
    opt_in(towline_installed, namespace, "hook-secret")
    apply(towline_installed, webhook_workflow("sneaky", namespace, standard_webhook("db-password")))
    wait_until_cached(ingress, namespace, "sneaky")
    response = post(hook_url(ingress, namespace, "sneaky"), BODY, signed_standard(new_whsec(), BODY))
    assert_refused(towline_installed, namespace, response, 503, "SigningKeyUnavailable", "docs/ingress.md")
    assert "may not read Secret" in ingress.log_text()
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{INGRESS_SERVICE_ACCOUNT}"
    for secret, allowed in (("hook-secret", "yes"), ("db-password", "no")):
        can = towline_installed.kubectl("auth", "can-i", "get", f"secret/{secret}", "-n", namespace, "--as", user,
                                        check=False)
        assert can.stdout.strip() == allowed
    for verb in ("list", "watch"):
        can = towline_installed.kubectl("auth", "can-i", verb, "secrets", "-n", namespace, "--as", user, check=False)
        assert can.stdout.strip() == "no"
    elsewhere = towline_installed.kubectl("auth", "can-i", "get", "secrets", "-n", "kube-system", "--as", user,
                                          check=False)
    assert elsewhere.stdout.strip() == "no"


def test_refusals_never_echo_the_signature_or_body(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, signed_hook: tuple[str, str]
) -> None:
    url, _ = signed_hook
    marker = b'{"card": "4111-1111-1111-1111"}'
    headers = signed_standard(new_whsec(), marker)
    response = post(url, marker, headers)
    assert response.status_code == 401
    log = ingress.log_text()
    assert "4111-1111" not in log and "4111-1111" not in response.text
    assert headers["webhook-signature"].split(",", 1)[1] not in log


def test_github_sha1_only_delivery_is_401(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str
) -> None:
    create_secret(towline_installed, namespace, "gh", {"secret": "It's a Secret to Everybody"})
    opt_in(towline_installed, namespace, "gh")
    apply(towline_installed, webhook_workflow("gh", namespace, {"verify": {
        "scheme": "github", "secretRef": {"name": "gh", "key": "secret"}}}))
    wait_until_cached(ingress, namespace, "gh")
    headers = {"Content-Type": "application/json", "X-Hub-Signature": "sha1=" + "0" * 40}
    response = post(hook_url(ingress, namespace, "gh"), BODY, headers)
    assert_refused(towline_installed, namespace, response, 401, "Unauthorized", "SHA-1")
    good = post(hook_url(ingress, namespace, "gh"), BODY, {
        "Content-Type": "application/json", **sign.github_headers(b"It's a Secret to Everybody", BODY, "gh-1")})
    assert good.status_code == 202, good.text


@pytest.fixture(scope="module")
def tight_ingress(towline_installed: ControlPlane, ingress: IngressProcess, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[IngressProcess]:
    """A second ingress that handles one delivery at a time, waits 1 s for a body and 2 s for a request head."""
    work = tmp_path_factory.mktemp("tight-ingress")
    process = IngressProcess(kubeconfig=ingress.kubeconfig, log_path=work / "ingress.log", max_in_flight=1,
                             namespace_in_flight=1, body_timeout=1.0, header_timeout=2.0).start()
    yield process
    process.stop()


def test_slow_body_is_408_and_a_full_ingress_answers_503_busy(
    towline_installed: ControlPlane, tight_ingress: IngressProcess, namespace: str, signed_hook: tuple[str, str]
) -> None:
    _, secret = signed_hook
    wait_until_cached(tight_ingress, namespace, "shop")
    path = f"/hooks/{namespace}/shop/hook"
    slow = socket.create_connection(("127.0.0.1", tight_ingress.port), timeout=10)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(BODY)}\r\n")
        for name, value in signed_standard(secret, BODY).items():
            if name != "Content-Type":
                head += f"{name}: {value}\r\n"
        slow.sendall((head + "\r\n").encode() + BODY[:5])  # the rest never comes
        wait_for("the slow delivery to hold the only slot (its 5 bytes buffered)",
                 lambda: ingress_gauge(tight_ingress, "towline_webhook_buffered_bytes") >= 5, timeout=10, interval=0.05)
        busy = post(f"{tight_ingress.url}{path}", BODY, signed_standard(secret, BODY))
        assert_refused(towline_installed, namespace, busy, 503, "Busy", "in flight")
        assert busy.headers["Retry-After"] == "1"
        answer = slow.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 408"), answer
        assert "BodyTimeout" in answer and "did not arrive within 1 s" in answer
    finally:
        slow.close()
    assert runs(towline_installed, namespace) == []


def test_a_deleted_workflow_is_404_once_the_watch_sees_it(
    towline_installed: ControlPlane, ingress: IngressProcess, namespace: str, signed_hook: tuple[str, str]
) -> None:
    url, secret = signed_hook
    towline_installed.kubectl("delete", "workflows.towline.dev", "shop", "-n", namespace)
    wait_until_cached(ingress, namespace, "shop", gone=True)
    assert_refused(towline_installed, namespace, post(url, BODY, signed_standard(secret, BODY)), 404,
                   "NotFound", "no webhook trigger")
    assert f"no Workflow shop in namespace {namespace}" in ingress.log_text()


def test_a_slow_request_head_is_cut_off(tight_ingress: IngressProcess) -> None:
    """Slowloris: a header line every half second never completes the head; the connection is closed."""
    slow = socket.create_connection(("127.0.0.1", tight_ingress.port), timeout=10)
    closed_after = None
    try:
        slow.sendall(b"POST /hooks/ns/wf/hook HTTP/1.1\r\nHost: x\r\n")
        for index in range(40):
            time.sleep(0.5)  # the attack's own pace: one header line every half second
            try:
                slow.sendall(f"X-Drip-{index}: 1\r\n".encode())
            except OSError:
                closed_after = index
                break
        else:
            slow.settimeout(1)
            closed_after = -1 if slow.recv(1) == b"" else None
    finally:
        slow.close()
    assert closed_after is not None, "the ingress kept a connection open for 20 s without a complete request head"


def test_a_workflow_the_operator_found_invalid_refuses_a_signed_delivery_keeps_it_and_tells_an_outsider_nothing(
    towline_installed: ControlPlane, towline_operator: OperatorProcess, ingress: IngressProcess, namespace: str
) -> None:
    """The trigger itself is sound, the Workflow's steps are not (the operator's validationErrors): a signed delivery
    is refused 409 WorkflowInvalid, starts nothing and waits as a dead letter while the author fixes the Workflow;
    an unsigned one is refused for its signature as to any valid Workflow, without a word about the problem."""
    secret = new_whsec()
    create_secret(towline_installed, namespace, "hook-secret", {"signing-secret": secret})
    opt_in(towline_installed, namespace, "hook-secret")
    manifest = webhook_workflow("typo", namespace, standard_webhook())
    manifest["spec"]["steps"][0]["needs"] = ["colect"]
    apply(towline_installed, manifest)
    wait_until_cached(ingress, namespace, "typo", log_marker=f"Workflow {namespace}/typo is not valid")
    unsigned = post(hook_url(ingress, namespace, "typo"), BODY, {"Content-Type": "application/json"})
    assert_refused(towline_installed, namespace, unsigned, 401, "Unauthorized", "")
    assert "colect" not in unsigned.text and "not valid" not in unsigned.text
    response = post(hook_url(ingress, namespace, "typo"), BODY, signed_standard(secret, BODY))
    assert_refused(towline_installed, namespace, response, 409, "WorkflowInvalid", "is not valid")
    assert "colect" not in response.text, "the problem is in the Workflow's status and the ingress log, for its author"
    assert "spec.steps[0].needs[0]" in ingress.log_text()
    store = json.loads(towline_installed.kubectl(
        "get", "configmap", DELIVERY_LETTERS_CONFIG_MAP, "-n", namespace, "-o", "json").stdout)["data"]
    letters = [json.loads(text) for key, text in store.items() if not key.endswith(".replayed")]
    assert [(letter["workflow"], letter["reason"]) for letter in letters] == [("typo", "WorkflowInvalid")], letters


def test_an_ingress_that_cannot_list_workflows_is_not_ready_and_starts_nothing(
    towline_installed: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Run as a ServiceAccount without the chart's role: alive, never ready, every delivery 503 NotReady."""
    kubeconfig = operator_kubeconfig(towline_installed, tmp_path / "kubeconfig", namespace, service_account="default")
    process = IngressProcess(kubeconfig=kubeconfig, log_path=tmp_path / "ingress.log").start(wait_ready=False)
    try:
        wait_for("the unprivileged ingress to serve /healthz", lambda: _status(f"{process.admin_url}/healthz") == 200)
        assert _status(f"{process.admin_url}/readyz") == 503
        response = post(f"{process.url}/hooks/{namespace}/shop/hook", BODY, signed_standard(new_whsec(), BODY))
        assert_refused(towline_installed, namespace, response, 503, "NotReady", "not loaded the Workflows")
        assert "Workflow watch of /apis/towline.dev/v1alpha1/workflows failed (ApiError: 403: " in process.log_text()
    finally:
        process.stop()


def _status(url: str) -> int | None:
    import httpx  # noqa: PLC0415

    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None

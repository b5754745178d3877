"""Error classes: each HTTP status family, transport failures, and unknown side effects."""

from __future__ import annotations

import email.utils
import socket

import pytest
from connector_testkit import LoopbackHTTPServer, Reply, make_ctx, run_action

from towline_connectors.errors import ActionError, ErrorClass, classify_http_status, parse_retry_after
from towline_step.protocol import MAX_RETRY_AFTER_SECONDS

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, ErrorClass.PERMANENT),
        (404, ErrorClass.PERMANENT),
        (409, ErrorClass.PERMANENT),
        (422, ErrorClass.PERMANENT),
        (401, ErrorClass.AUTH),
        (403, ErrorClass.AUTH),
        (408, ErrorClass.TRANSIENT),
        (429, ErrorClass.RATE_LIMIT),
        (500, ErrorClass.TRANSIENT),
        (502, ErrorClass.TRANSIENT),
        (503, ErrorClass.TRANSIENT),
        (504, ErrorClass.TRANSIENT),
    ],
)
def test_http_status_maps_to_its_error_class(
    status: int, expected: ErrorClass, http_server: LoopbackHTTPServer
) -> None:
    http_server.routes["/"] = Reply(status, {"error": "nope"})
    with pytest.raises(ActionError) as caught:
        run_action("http.request", {"url": http_server.url("/")}, make_ctx())
    assert caught.value.error_class is expected
    assert f"HTTP {status}" in caught.value.message


def test_error_message_carries_the_start_of_the_response_body(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(422, {"error": "field 'due' is required"})
    with pytest.raises(ActionError, match="field 'due' is required"):
        run_action("http.request", {"url": http_server.url("/")}, make_ctx())


def test_rate_limit_reports_retry_after_seconds(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(429, headers={"Retry-After": "7"})
    with pytest.raises(ActionError) as caught:
        run_action("http.request", {"url": http_server.url("/")}, make_ctx())
    assert caught.value.retry_after_seconds == 7.0
    assert caught.value.retryable


def test_service_unavailable_carries_retry_after_as_a_date() -> None:
    header = email.utils.formatdate(NOW + 30, usegmt=True)
    error = classify_http_status(503, {"retry-after": header}, now=NOW, what="GET api.example.com")
    assert error is not None
    assert (error.error_class, error.retry_after_seconds) == (ErrorClass.TRANSIENT, 30.0)


@pytest.mark.parametrize("value", ["soon", "", "-5", "Thu, 99 Foo 2026"])
def test_unparseable_retry_after_is_ignored(value: str) -> None:
    assert parse_retry_after(value, NOW) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("300000000000", MAX_RETRY_AFTER_SECONDS),
        ("9" * 5000, MAX_RETRY_AFTER_SECONDS),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER_SECONDS),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("86400", MAX_RETRY_AFTER_SECONDS),
        ("7", 7.0),
    ],
)
def test_retry_after_is_clamped_to_the_protocols_maximum(value: str, expected: float) -> None:
    assert parse_retry_after(value, NOW) == expected


@pytest.mark.parametrize("value", ["\u00b2", "\u0663\u0660", "Mon, 01 Jan 99999999 00:00:00 GMT"])
def test_retry_after_in_other_digits_or_past_the_calendar_is_ignored(value: str) -> None:
    assert parse_retry_after(value, NOW) is None


def test_a_429_asking_for_300000000000_seconds_reports_the_maximum(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(429, headers={"Retry-After": "300000000000"})
    with pytest.raises(ActionError) as caught:
        run_action("http.request", {"url": http_server.url("/")}, make_ctx())
    assert caught.value.retry_after_seconds == MAX_RETRY_AFTER_SECONDS


def test_success_statuses_are_not_errors() -> None:
    assert classify_http_status(204, {}, now=NOW, what="x") is None
    assert classify_http_status(304, {}, now=NOW, what="x") is None


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_refused_is_transient_even_for_a_post() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/"
    with pytest.raises(ActionError, match="could not connect") as caught:
        run_action("http.request", {"url": url, "method": "POST", "json": {}}, make_ctx())
    assert caught.value.error_class is ErrorClass.TRANSIENT


def test_get_whose_connection_drops_is_transient(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(drop=True)
    with pytest.raises(ActionError) as caught:
        run_action("http.request", {"url": http_server.url("/")}, make_ctx())
    assert caught.value.error_class is ErrorClass.TRANSIENT


def test_post_whose_connection_drops_after_sending_is_an_unknown_side_effect(
    http_server: LoopbackHTTPServer,
) -> None:
    http_server.routes["/charge"] = Reply(drop=True)
    with pytest.raises(ActionError, match="may have taken effect") as caught:
        run_action("http.request", {"url": http_server.url("/charge"), "method": "POST", "json": {}}, make_ctx())
    assert caught.value.error_class is ErrorClass.UNKNOWN_SIDE_EFFECT
    assert len(http_server.requests) == 1


def test_post_that_times_out_waiting_for_the_answer_is_an_unknown_side_effect(
    http_server: LoopbackHTTPServer,
) -> None:
    http_server.routes["/slow"] = Reply(200, delay=1.0)
    inputs = {"url": http_server.url("/slow"), "method": "POST", "json": {}, "timeoutSeconds": 0.2}
    with pytest.raises(ActionError) as caught:
        run_action("http.request", inputs, make_ctx())
    assert caught.value.error_class is ErrorClass.UNKNOWN_SIDE_EFFECT


def test_get_that_times_out_is_transient(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/slow"] = Reply(200, delay=1.0)
    with pytest.raises(ActionError, match="timed out") as caught:
        run_action("http.request", {"url": http_server.url("/slow"), "timeoutSeconds": 0.2}, make_ctx())
    assert caught.value.error_class is ErrorClass.TRANSIENT


def test_unknown_host_is_permanent() -> None:
    with pytest.raises(ActionError, match=r"could not resolve nowhere\.example\.com") as caught:
        run_action("http.request", {"url": "https://nowhere.example.com/"}, make_ctx())
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_temporary_dns_failure_is_transient() -> None:
    ctx = make_ctx()

    def flaky(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    ctx.guard._resolver = flaky
    with pytest.raises(ActionError) as caught:
        run_action("http.request", {"url": "https://api.example.com/"}, ctx)
    assert caught.value.error_class is ErrorClass.TRANSIENT

"""The attempt's traceparent: read strictly from TRACEPARENT, sent by http.request and webhook.send unless opted out."""

from __future__ import annotations

from dataclasses import replace

import pytest
from connector_testkit import LoopbackHTTPServer, Reply, make_ctx, run_action

from towline_connectors.context import ActionContext
from towline_connectors.registry import ACTIONS, validate_inputs
from towline_connectors.runner import read_config

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
SECRET = {"webhook": {"signing-secret": "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="}}


def traced(**credentials: dict[str, str]) -> ActionContext:
    return replace(make_ctx(credentials=credentials or None), traceparent=TRACEPARENT)


def test_http_request_sends_the_attempts_traceparent(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    run_action("http.request", {"url": http_server.url("/")}, traced())
    assert http_server.requests[0].headers["traceparent"] == TRACEPARENT


def test_http_request_trace_context_false_sends_none(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    run_action("http.request", {"url": http_server.url("/"), "traceContext": False}, traced())
    assert "traceparent" not in http_server.requests[0].headers


def test_an_untraced_attempt_sends_no_traceparent(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    run_action("http.request", {"url": http_server.url("/")}, make_ctx())
    assert "traceparent" not in http_server.requests[0].headers


def test_webhook_send_carries_the_traceparent_unless_opted_out(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/hook"] = Reply(204)
    run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}}, traced(**SECRET))
    run_action("webhook.send", {"url": http_server.url("/hook"), "payload": {}, "traceContext": False},
               traced(**SECRET))
    first, second = http_server.requests
    assert first.headers["traceparent"] == TRACEPARENT
    assert "traceparent" not in second.headers


def test_trace_context_must_be_a_boolean() -> None:
    problems = validate_inputs("http.request", {"url": "https://example.com", "traceContext": "no"})
    assert any("traceContext" in problem for problem in problems), problems


@pytest.mark.parametrize("value", ["", "garbage", TRACEPARENT.upper(), TRACEPARENT + "x",
                                   "00-00000000000000000000000000000000-00f067aa0ba902b7-01"])
def test_the_runner_drops_a_traceparent_that_is_not_well_formed(value: str) -> None:
    environ = {"TOWLINE_ACTION": "http.request", "TOWLINE_INPUT": '{"url":"https://example.com"}',
               "TRACEPARENT": value}
    assert read_config(environ, ACTIONS).traceparent is None


def test_the_runner_reads_a_well_formed_traceparent() -> None:
    environ = {"TOWLINE_ACTION": "http.request", "TOWLINE_INPUT": '{"url":"https://example.com"}',
               "TRACEPARENT": TRACEPARENT}
    assert read_config(environ, ACTIONS).traceparent == TRACEPARENT

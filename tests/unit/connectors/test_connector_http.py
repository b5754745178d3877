"""http.request against a real HTTP(S) server on loopback (loopback explicitly opted in)."""

from __future__ import annotations

import base64
import urllib.parse

import pytest
from connector_testkit import (
    LoopbackHTTPServer,
    RecordedRequest,
    Reply,
    TLSMaterial,
    make_ctx,
    output_of,
    run_action,
)

from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.registry import validate_inputs

CREDENTIALS = {"crm": {"token": "tok-9f8e7d6c", "username": "robot", "password": "pa55-w0rd"}}


def test_get_returns_status_selected_headers_and_json_body(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/accounts"] = Reply(200, {"accounts": [1, 2]}, headers={"ETag": '"v1"', "X-Noise": "x"})
    result = run_action("http.request", {"url": http_server.url("/accounts")}, make_ctx())
    assert output_of(result) == {
        "status": 200,
        "headers": {"etag": '"v1"', "content-type": "application/json"},
        "body": {"accounts": [1, 2]},
    }


def test_post_json_sends_body_content_type_and_idempotency_key(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/tasks"] = Reply(201, {"id": 7})
    inputs = {"url": http_server.url("/tasks"), "method": "POST", "json": [{"name": "renew"}]}
    run_action("http.request", inputs, make_ctx(idempotency_key="renewal-run-42-create"))
    request = http_server.requests[0]
    assert request.json() == [{"name": "renew"}]
    assert request.headers["content-type"] == "application/json"
    assert request.headers["idempotency-key"] == "renewal-run-42-create"


def test_get_sends_no_idempotency_key(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    run_action("http.request", {"url": http_server.url("/")}, make_ctx())
    assert "idempotency-key" not in http_server.requests[0].headers


def test_form_body_is_url_encoded(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/form"] = Reply(200)
    inputs = {"url": http_server.url("/form"), "method": "PUT", "form": {"a": "1 2", "b": "x&y"}}
    run_action("http.request", inputs, make_ctx())
    request = http_server.requests[0]
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert urllib.parse.parse_qs(request.body.decode()) == {"a": ["1 2"], "b": ["x&y"]}


def test_raw_body_is_sent_as_is_with_the_given_content_type(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/raw"] = Reply(200)
    inputs = {
        "url": http_server.url("/raw"),
        "method": "PATCH",
        "body": "<x>1</x>",
        "headers": {"Content-Type": "application/xml"},
    }
    run_action("http.request", inputs, make_ctx())
    assert http_server.requests[0].body == b"<x>1</x>"
    assert http_server.requests[0].headers["content-type"] == "application/xml"


def test_any_method_is_sent_and_treated_as_mutating(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/cache"] = Reply(200)
    run_action("http.request", {"url": http_server.url("/cache"), "method": "purge"}, make_ctx())
    assert http_server.requests[0].method == "PURGE"
    assert "idempotency-key" in http_server.requests[0].headers


def test_query_parameters_are_added_to_the_url(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/search"] = Reply(200)
    inputs = {"url": http_server.url("/search?q=a"), "query": {"limit": 10, "active": True}}
    run_action("http.request", inputs, make_ctx())
    assert urllib.parse.parse_qs(http_server.requests[0].path.split("?", 1)[1]) == {
        "q": ["a"],
        "limit": ["10"],
        "active": ["true"],
    }


def test_bearer_auth_reads_the_token_from_the_credential(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    inputs = {"url": http_server.url("/"), "auth": {"bearer": {"credential": "crm", "key": "token"}}}
    run_action("http.request", inputs, make_ctx(credentials=CREDENTIALS))
    assert http_server.requests[0].headers["authorization"] == "Bearer tok-9f8e7d6c"


def test_basic_auth_reads_username_and_password(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    inputs = {"url": http_server.url("/"), "auth": {"basic": {"credential": "crm"}}}
    ctx = make_ctx(credentials=CREDENTIALS)
    run_action("http.request", inputs, ctx)
    encoded = base64.b64encode(b"robot:pa55-w0rd").decode()
    assert http_server.requests[0].headers["authorization"] == f"Basic {encoded}"
    assert ctx.redactor.redact(encoded) == "[REDACTED]"


def test_header_auth_uses_the_named_header_and_prefix(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200)
    auth = {"header": {"name": "X-Api-Key", "credential": "crm", "key": "token", "prefix": "Token "}}
    run_action("http.request", {"url": http_server.url("/"), "auth": auth}, make_ctx(credentials=CREDENTIALS))
    assert http_server.requests[0].headers["x-api-key"] == "Token tok-9f8e7d6c"


def test_credential_with_a_line_break_is_an_auth_error(http_server: LoopbackHTTPServer) -> None:
    inputs = {"url": http_server.url("/"), "auth": {"bearer": {"credential": "crm", "key": "token"}}}
    ctx = make_ctx(credentials={"crm": {"token": "abc\r\nX-Injected: 1"}})
    with pytest.raises(ActionError, match="line break") as caught:
        run_action("http.request", inputs, ctx)
    assert caught.value.error_class is ErrorClass.AUTH
    assert http_server.requests == []


def test_response_larger_than_the_cap_fails_permanently(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/big"] = Reply(200, b"x" * 5000)
    with pytest.raises(ActionError, match="larger than maxResponseBytes=1000") as caught:
        run_action("http.request", {"url": http_server.url("/big"), "maxResponseBytes": 1000}, make_ctx())
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_redirects_are_followed_to_the_final_response(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/old"] = Reply(301, headers={"Location": "/new"})
    http_server.routes["/new"] = Reply(200, "moved here")
    result = run_action("http.request", {"url": http_server.url("/old")}, make_ctx())
    assert output_of(result)["body"] == "moved here"


def test_redirect_chain_longer_than_the_cap_fails(http_server: LoopbackHTTPServer) -> None:
    for hop in range(4):
        http_server.routes[f"/{hop}"] = Reply(302, headers={"Location": f"/{hop + 1}"})
    with pytest.raises(ActionError, match="redirected more than 2 times"):
        run_action("http.request", {"url": http_server.url("/0"), "maxRedirects": 2}, make_ctx())
    assert len(http_server.requests) == 3


def test_see_other_after_post_is_followed_with_a_get_without_body(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/submit"] = Reply(303, headers={"Location": "/status"})
    http_server.routes["/status"] = Reply(200, "done")
    run_action("http.request", {"url": http_server.url("/submit"), "method": "POST", "json": {"a": 1}}, make_ctx())
    follow_up = http_server.requests[1]
    assert (follow_up.method, follow_up.body, "content-type" in follow_up.headers) == ("GET", b"", False)


def test_redirect_to_another_origin_drops_credentials(http_server: LoopbackHTTPServer) -> None:
    other = http_server.url("/landing", host="files.example.test")
    http_server.routes["/start"] = Reply(302, headers={"Location": other})
    http_server.routes["/landing"] = Reply(200)
    inputs = {
        "url": http_server.url("/start"),
        "auth": {"header": {"name": "X-Api-Key", "credential": "crm", "key": "token"}},
        "headers": {"Authorization": "Bearer literal"},
    }
    run_action("http.request", inputs, make_ctx(credentials=CREDENTIALS, hosts={"files.example.test": ["127.0.0.1"]}))
    first, second = http_server.requests
    assert "x-api-key" in first.headers
    assert "x-api-key" not in second.headers
    assert "authorization" not in second.headers


def test_redirect_is_returned_when_following_is_off(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/old"] = Reply(302, headers={"Location": "/new"})
    result = run_action("http.request", {"url": http_server.url("/old"), "followRedirects": False}, make_ctx())
    assert output_of(result)["status"] == 302
    assert output_of(result)["headers"]["location"] == "/new"


def test_select_keeps_only_what_the_expression_returns(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/accounts"] = Reply(200, {"accounts": [{"id": 1, "blob": "x" * 100}, {"id": 2}]})
    inputs = {"url": http_server.url("/accounts"), "select": "response.body.accounts.map(a, a.id)"}
    assert run_action("http.request", inputs, make_ctx()).output == [1, 2]


def test_accepted_status_is_returned_as_output(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/maybe"] = Reply(404, {"error": "none"})
    inputs = {"url": http_server.url("/maybe"), "acceptStatuses": [404]}
    assert output_of(run_action("http.request", inputs, make_ctx()))["status"] == 404


def test_head_request_returns_no_body(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/"] = Reply(200, "ignored")
    assert (
        output_of(run_action("http.request", {"url": http_server.url("/"), "method": "HEAD"}, make_ctx()))["body"]
        is None
    )


def test_url_with_a_password_is_rejected_at_validation() -> None:
    assert validate_inputs("http.request", {"url": "http://user:secret@api.example.com/"}) == [
        "with.url: must not contain a user name or password; use `auth` with a credential reference"
    ]


def test_relative_url_is_rejected_at_validation() -> None:
    assert validate_inputs("http.request", {"url": "api.example.com/v1"}) == [
        "with.url: must be an absolute http:// or https:// URL"
    ]


def test_https_connects_to_the_validated_ip_but_verifies_the_hostname(
    https_server: LoopbackHTTPServer, tls: TLSMaterial
) -> None:
    https_server.routes["/secure"] = Reply(200, {"tls": True})
    ctx = make_ctx(hosts={"api.example.test": ["127.0.0.1"]}, ssl_context=tls.client_context())
    result = run_action("http.request", {"url": https_server.url("/secure", host="api.example.test")}, ctx)
    assert output_of(result)["body"] == {"tls": True}
    assert https_server.requests[0].headers["host"] == f"api.example.test:{https_server.port}"


def test_https_certificate_for_another_name_is_a_permanent_error(
    https_server: LoopbackHTTPServer, tls: TLSMaterial
) -> None:
    ctx = make_ctx(hosts={"other.example.test": ["127.0.0.1"]}, ssl_context=tls.client_context())
    with pytest.raises(ActionError, match="certificate verification failed") as caught:
        run_action("http.request", {"url": https_server.url("/", host="other.example.test")}, ctx)
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_echoing_server_sees_exactly_the_request_body(http_server: LoopbackHTTPServer) -> None:
    def echo(request: RecordedRequest) -> Reply:
        return Reply(200, {"got": request.json()})

    http_server.routes["/echo"] = echo
    inputs = {"url": http_server.url("/echo"), "method": "POST", "json": {"ü": "ß"}}
    assert output_of(run_action("http.request", inputs, make_ctx()))["body"] == {"got": {"ü": "ß"}}

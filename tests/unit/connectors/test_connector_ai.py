"""ai.chat against an OpenAI-compatible test endpoint on loopback."""

from __future__ import annotations

from typing import Any

import pytest
from connector_testkit import LoopbackHTTPServer, RecordedRequest, Reply, make_ctx, output_of, run_action

from towline_connectors.errors import ActionError, ErrorClass

CREDENTIALS = {"llm": {"api-key": "sk-test-51fa"}}


def completion(content: str, model: str = "towline-mini-2026-01-15") -> dict[str, Any]:
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "model": model,
        "system_fingerprint": "fp_abc",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 5, "total_tokens": 26},
    }


def _inputs(server: LoopbackHTTPServer, **overrides: Any) -> dict[str, Any]:
    inputs = {
        "baseUrl": server.url("/v1"),
        "model": "towline-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Status?"}],
        "apiKey": {"credential": "llm", "key": "api-key"},
    }
    inputs.update(overrides)
    return inputs


def test_chat_records_provider_model_version_and_usage(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(200, completion("All good."))
    result = run_action("ai.chat", _inputs(http_server, provider="local-test"), make_ctx(credentials=CREDENTIALS))
    output = output_of(result)
    assert output["content"] == "All good."
    assert (output["provider"], output["model"], output["modelVersion"]) == (
        "local-test",
        "towline-mini",
        "towline-mini-2026-01-15",
    )
    assert output["usage"] == {"promptTokens": 21, "completionTokens": 5, "totalTokens": 26}
    assert result.usage == {
        "provider": "local-test",
        "model": "towline-mini",
        "modelVersion": "towline-mini-2026-01-15",
        "promptTokens": 21,
        "completionTokens": 5,
        "totalTokens": 26,
    }


def test_request_is_an_openai_compatible_chat_completion(http_server: LoopbackHTTPServer) -> None:
    seen: list[RecordedRequest] = []

    def endpoint(request: RecordedRequest) -> Reply:
        seen.append(request)
        return Reply(200, completion("ok"))

    http_server.routes["/v1/chat/completions"] = endpoint
    inputs = _inputs(http_server, temperature=0.2, maxTokens=50, extra={"seed": 7})
    run_action("ai.chat", inputs, make_ctx(credentials=CREDENTIALS))
    body = seen[0].json()
    assert seen[0].headers["authorization"] == "Bearer sk-test-51fa"
    assert body == {
        "seed": 7,
        "model": "towline-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Status?"}],
        "temperature": 0.2,
        "max_tokens": 50,
    }


def test_provider_defaults_to_the_base_url_host(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(200, completion("ok"))
    ctx = make_ctx(credentials=CREDENTIALS, hosts={"llm.example.test": ["127.0.0.1"]})
    inputs = _inputs(http_server, baseUrl=http_server.url("/v1", host="llm.example.test"))
    assert output_of(run_action("ai.chat", inputs, ctx))["provider"] == "llm.example.test"


def test_json_response_format_is_parsed(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(200, completion('{"risk": "low"}'))
    result = run_action(
        "ai.chat", _inputs(http_server, responseFormat="json_object"), make_ctx(credentials=CREDENTIALS)
    )
    assert output_of(result)["json"] == {"risk": "low"}


def test_rate_limit_carries_retry_after(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(
        429, {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}, headers={"Retry-After": "20"}
    )
    with pytest.raises(ActionError) as caught:
        run_action("ai.chat", _inputs(http_server), make_ctx(credentials=CREDENTIALS))
    assert (caught.value.error_class, caught.value.retry_after_seconds) == (ErrorClass.RATE_LIMIT, 20.0)


def test_exhausted_quota_is_permanent_not_rate_limited(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(
        429, {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    )
    with pytest.raises(ActionError, match="quota") as caught:
        run_action("ai.chat", _inputs(http_server), make_ctx(credentials=CREDENTIALS))
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_invalid_key_is_an_auth_error_with_the_provider_message(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(401, {"error": {"message": "Incorrect API key provided"}})
    with pytest.raises(ActionError, match="Incorrect API key provided") as caught:
        run_action("ai.chat", _inputs(http_server), make_ctx(credentials=CREDENTIALS))
    assert caught.value.error_class is ErrorClass.AUTH


def test_server_error_is_transient(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(500, {"error": {"message": "overloaded"}})
    with pytest.raises(ActionError) as caught:
        run_action("ai.chat", _inputs(http_server), make_ctx(credentials=CREDENTIALS))
    assert caught.value.error_class is ErrorClass.TRANSIENT


def test_response_without_choices_is_permanent(http_server: LoopbackHTTPServer) -> None:
    http_server.routes["/v1/chat/completions"] = Reply(200, {"id": "x", "choices": []})
    with pytest.raises(ActionError, match="no choices") as caught:
        run_action("ai.chat", _inputs(http_server), make_ctx(credentials=CREDENTIALS))
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_missing_key_in_the_credential_is_an_auth_error(http_server: LoopbackHTTPServer) -> None:
    with pytest.raises(ActionError, match="has no key 'api-key'") as caught:
        run_action("ai.chat", _inputs(http_server), make_ctx(credentials={"llm": {"token": "x"}}))
    assert caught.value.error_class is ErrorClass.AUTH


def test_unmounted_credential_is_a_validation_error(http_server: LoopbackHTTPServer) -> None:
    with pytest.raises(ActionError, match="'llm' is not mounted") as caught:
        run_action("ai.chat", _inputs(http_server), make_ctx())
    assert caught.value.error_class is ErrorClass.VALIDATION

"""`ai.chat`: one OpenAI-compatible chat-completions call.

No provider is built in: the step names the base URL and model, the key comes
from its credential. The result records provider, requested model, the model
version the server reports and token usage, so costs and behaviour changes are
auditable per run. This module must never send the key anywhere but the
Authorization header of the configured base URL.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass, classify_http_status
from towline_connectors.httpcall import HttpCall, HttpReply, header_safe_secret, parse_url, send
from towline_connectors.models import CredentialRef, HttpUrlText, InputModel, OutputModel
from towline_connectors.spec import (
    ActionResult,
    ActionSpec,
    CredentialRequirement,
    RetryDefaults,
    url_input_destinations,
)

# Parameters the action owns; `extra` may not override them.
_OWNED_PARAMETERS = frozenset({"model", "messages", "stream", "temperature", "max_tokens", "response_format"})


class ChatMessage(InputModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]]
    name: str | None = None


class AiChatInput(InputModel):
    """`with:` of ai.chat."""

    base_url: HttpUrlText = Field(
        description="API root, e.g. https://api.openai.com/v1 (…/chat/completions is appended)."
    )
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    api_key: CredentialRef | None = Field(default=None, description="Sent as a bearer token when set.")
    provider: str | None = Field(default=None, description="Label for the result; default: the base URL's host.")
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    response_format: Literal["text", "json_object"] | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="More request parameters (top_p, seed, stop...).")
    timeout_seconds: float = Field(default=120.0, gt=0, le=3600)

    @field_validator("extra")
    @classmethod
    def _extra_does_not_override(cls, extra: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(_OWNED_PARAMETERS & extra.keys())
        if clash:
            raise ValueError(f"{', '.join(clash)} cannot be set in extra; use the field of that name")
        return extra


class TokenUsage(OutputModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class AiChatOutput(OutputModel):
    content: str | None
    json_content: Any = Field(default=None, alias="json", description="`content` parsed, for json_object.")
    finish_reason: str | None
    provider: str
    model: str
    model_version: str | None = Field(description="The model the server says answered.")
    system_fingerprint: str | None = None
    response_id: str | None = None
    usage: TokenUsage


def _request_body(inputs: AiChatInput) -> dict[str, Any]:
    body: dict[str, Any] = {
        **inputs.extra,
        "model": inputs.model,
        "messages": [m.model_dump(exclude_none=True) for m in inputs.messages],
    }
    if inputs.temperature is not None:
        body["temperature"] = inputs.temperature
    if inputs.max_tokens is not None:
        body["max_tokens"] = inputs.max_tokens
    if inputs.response_format is not None:
        body["response_format"] = {"type": inputs.response_format}
    return body


def _provider_error(reply: HttpReply, now: float) -> ActionError | None:
    error = classify_http_status(reply.status, reply.headers, now=now, what=reply.what)
    if error is None:
        return None
    detail = _error_detail(reply)
    if reply.status == 429 and detail.get("code") == "insufficient_quota":
        return ActionError(ErrorClass.PERMANENT, f"{reply.what}: the account's quota is exhausted; check billing")
    message = detail.get("message")
    suffix = f": {message}" if isinstance(message, str) else reply.snippet()
    return ActionError(error.error_class, error.message + suffix, retry_after_seconds=error.retry_after_seconds)


def _error_detail(reply: HttpReply) -> dict[str, Any]:
    try:
        document = json.loads(reply.body)
    except ValueError:
        return {}
    detail = document.get("error") if isinstance(document, dict) else None
    return detail if isinstance(detail, dict) else {}


def parse_completion(document: Any, inputs: AiChatInput, provider: str) -> AiChatOutput:
    """The first choice, the model version and usage from a chat-completions response."""
    choices = document.get("choices") if isinstance(document, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ActionError(ErrorClass.PERMANENT, f"{provider} returned no choices")
    message = choices[0].get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    parsed: Any = None
    if inputs.response_format == "json_object" and isinstance(content, str):
        try:
            parsed = json.loads(content)
        except ValueError:
            raise ActionError(ErrorClass.PERMANENT, f"{provider} was asked for JSON but returned other text") from None
    usage = document.get("usage") if isinstance(document.get("usage"), dict) else {}
    return AiChatOutput(
        content=content if isinstance(content, str) else None,
        json_content=parsed,
        finish_reason=choices[0].get("finish_reason"),
        provider=provider,
        model=inputs.model,
        model_version=document.get("model"),
        system_fingerprint=document.get("system_fingerprint"),
        response_id=document.get("id"),
        usage=TokenUsage.model_validate(usage),
    )


async def run_chat(inputs: AiChatInput, ctx: ActionContext) -> ActionResult:
    base = parse_url(inputs.base_url, "baseUrl")
    provider = inputs.provider or base.host
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if inputs.api_key is not None:
        headers["Authorization"] = f"Bearer {header_safe_secret(ctx, inputs.api_key)}"
    reply = await send(
        ctx,
        HttpCall(
            method="POST",
            url=str(base).rstrip("/") + "/chat/completions",
            headers=headers,
            content=json.dumps(_request_body(inputs), ensure_ascii=False).encode(),
            mutating=False,
            timeout_seconds=inputs.timeout_seconds,
            max_response_bytes=4 * 1024 * 1024,
        ),
    )
    error = _provider_error(reply, ctx.clock())
    if error is not None:
        raise error
    try:
        document = json.loads(reply.body)
    except ValueError:
        raise ActionError(ErrorClass.PERMANENT, f"{provider} answered with something other than JSON") from None
    output = parse_completion(document, inputs, provider)
    usage = {
        "provider": provider,
        "model": inputs.model,
        "modelVersion": output.model_version,
        **output.usage.model_dump(by_alias=True),
    }
    return ActionResult(output=output, usage=usage)


SPEC = ActionSpec(
    name="ai.chat",
    summary="Call an OpenAI-compatible chat-completions API; records model version and token usage",
    input_model=AiChatInput,
    output_model=AiChatOutput,
    run=run_chat,
    credential=CredentialRequirement(type="openai-compatible-api-key", required_keys=("api-key",), optional=True),
    mutating=False,
    default_retry=RetryDefaults(limit=4, base_delay_seconds=2.0, max_delay_seconds=120.0),
    rate_limit_hint="provider-specific (requests and tokens per minute); 429 and Retry-After are honoured",
    shrink_hint="lower `with.maxTokens` or ask the model for a shorter answer",
    destinations_for=url_input_destinations("baseUrl"),
)

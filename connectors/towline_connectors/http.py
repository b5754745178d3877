"""`http.request`: one HTTP call to any API, with credentials from a mounted Secret.

Every connection goes through the SSRF guard; mutating methods carry the step's
Idempotency-Key. This module must never put a credential value into a header
it did not register with the redactor, nor into a message.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from typing import Any, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass, classify_http_status
from towline_connectors.httpcall import (
    CONTROL_CHARS,
    SAFE_METHODS,
    HttpCall,
    HttpReply,
    header_safe_secret,
    parse_url,
    send,
)
from towline_connectors.models import CredentialRef, HttpUrlText, InputModel, OutputModel, UserPassRef
from towline_connectors.spec import (
    IDEMPOTENCY_KEY_HEADER,
    ActionResult,
    ActionSpec,
    CredentialRequirement,
    Inputs,
    RetryDefaults,
    url_input_destinations,
)
from towline_connectors.transform import check_expression, evaluate
from towline_connectors.wire import is_template

_RUNNER_OWNED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class HeaderCredential(InputModel):
    """A credential sent in a header of your choice: `{name: X-Api-Key, credential: crm, key: token}`."""

    name: str = Field(min_length=1, pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    credential: str = Field(min_length=1)
    key: str = Field(min_length=1)
    prefix: str = Field(default="", description="Text before the value, e.g. `Token `.")

    @property
    def ref(self) -> CredentialRef:
        return CredentialRef(credential=self.credential, key=self.key)


class HttpAuth(InputModel):
    """Exactly one of `bearer`, `basic` or `header`."""

    bearer: CredentialRef | None = None
    basic: UserPassRef | None = None
    header: HeaderCredential | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> HttpAuth:
        chosen = [name for name in ("bearer", "basic", "header") if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError("set exactly one of bearer, basic or header")
        return self


class HttpRequestInput(InputModel):
    """`with:` of http.request."""

    url: HttpUrlText = Field(description="Absolute http(s) URL.")
    method: str = Field(default="GET", pattern=r"^[A-Za-z]+$")
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str | int | float | bool] = Field(default_factory=dict)
    json_body: Any = Field(default=None, alias="json", description="Sent as JSON.")
    form: dict[str, str] | None = Field(default=None, description="Sent as application/x-www-form-urlencoded.")
    body: str | None = Field(default=None, description="Sent as-is; set content-type in `headers`.")
    auth: HttpAuth | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    max_response_bytes: int = Field(default=1024 * 1024, gt=0, le=64 * 1024 * 1024)
    follow_redirects: bool = True
    max_redirects: int = Field(default=5, ge=0, le=20)
    accept_statuses: list[int] = Field(default_factory=list, description="Error statuses to treat as success.")
    trace_context: StrictBool = Field(
        default=True, description="Send the attempt's W3C `traceparent` header while the operator exports traces; "
        "false keeps the run's trace ids from this host.",
    )
    response_headers: list[str] = Field(default_factory=lambda: ["content-type", "location", "etag"])
    response_format: Literal["auto", "json", "text", "base64"] = "auto"
    select: str | None = Field(
        default=None, description="CEL over `response` ({status, headers, body}); its value becomes the output."
    )

    @field_validator("headers")
    @classmethod
    def _headers_are_ours_to_send(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if name.lower() in _RUNNER_OWNED_HEADERS:
                raise ValueError(f"header {name!r} is set by the runner; remove it")
            if CONTROL_CHARS.search(value) and not is_template(value):
                raise ValueError(f"header {name!r} contains a line break or control character")
        return headers

    @field_validator("select")
    @classmethod
    def _select_compiles(cls, select: str | None) -> str | None:
        return None if select is None else check_expression(select)

    @model_validator(mode="after")
    def _one_body(self) -> HttpRequestInput:
        given = [name for name in ("json_body", "form", "body") if name in self.model_fields_set]
        if len(given) > 1:
            raise ValueError("set at most one of json, form or body")
        return self


class HttpResponseOutput(OutputModel):
    """The response; with `select`, the output is the selected value instead."""

    status: int
    headers: dict[str, str]
    body: Any


def is_mutating_request(inputs: Inputs) -> bool:
    """GET, HEAD, OPTIONS and TRACE do not mutate; anything else, or a templated method, may."""
    method = inputs.get("method", "GET")
    return not isinstance(method, str) or is_template(method) or method.upper() not in SAFE_METHODS


def _request_body(inputs: HttpRequestInput) -> tuple[bytes | None, str | None]:
    if "json_body" in inputs.model_fields_set:
        return json.dumps(inputs.json_body, separators=(",", ":")).encode(), "application/json"
    if inputs.form is not None:
        return urllib.parse.urlencode(inputs.form).encode(), "application/x-www-form-urlencoded"
    if inputs.body is not None:
        return inputs.body.encode(), None
    return None, None


def apply_auth(auth: HttpAuth | None, headers: dict[str, str], ctx: ActionContext) -> tuple[str, ...]:
    """Add the auth header; returns header names to drop if a redirect leaves the origin."""
    if auth is None:
        return ()
    if auth.bearer is not None:
        headers["Authorization"] = f"Bearer {header_safe_secret(ctx, auth.bearer)}"
        return ()
    if auth.basic is not None:
        user = header_safe_secret(ctx, auth.basic.username)
        password = header_safe_secret(ctx, auth.basic.password)
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        ctx.register_secret(encoded)
        headers["Authorization"] = f"Basic {encoded}"
        return ()
    assert auth.header is not None
    headers[auth.header.name] = auth.header.prefix + header_safe_secret(ctx, auth.header.ref)
    return (auth.header.name.lower(),)


def decode_body(reply: HttpReply, response_format: str) -> Any:
    """The body as JSON, text or base64, as the step asked; `auto` trusts content-type."""
    if not reply.body:
        return None
    if response_format == "base64":
        return base64.b64encode(reply.body).decode("ascii")
    is_json = "json" in reply.headers.get("content-type", "").lower()
    if response_format == "json" or (response_format == "auto" and is_json):
        try:
            return json.loads(reply.body)
        except ValueError:
            if response_format == "json":
                raise ActionError(
                    ErrorClass.PERMANENT, f"the response from {reply.what} is not valid JSON{reply.snippet()}"
                ) from None
    return reply.body.decode(_charset(reply) or "utf-8", "replace")


def _charset(reply: HttpReply) -> str | None:
    match = re.search(r"charset=([\w.-]+)", reply.headers.get("content-type", ""), re.IGNORECASE)
    return match.group(1) if match else None


async def run_http_request(inputs: HttpRequestInput, ctx: ActionContext) -> ActionResult:
    method = inputs.method.upper()
    mutating = method not in SAFE_METHODS
    headers = dict(inputs.headers)
    content, content_type = _request_body(inputs)
    lower_names = {name.lower() for name in headers}
    if content_type and "content-type" not in lower_names:
        headers["Content-Type"] = content_type
    sensitive = apply_auth(inputs.auth, headers, ctx)
    if mutating and "idempotency-key" not in lower_names:
        headers["Idempotency-Key"] = ctx.idempotency_key
    if inputs.trace_context and ctx.traceparent and "traceparent" not in lower_names:
        headers["traceparent"] = ctx.traceparent
    url = parse_url(inputs.url)
    if inputs.query:  # merging re-encodes the query string, so only when there is something to add
        url = url.copy_merge_params({k: _query_value(v) for k, v in inputs.query.items()})
    reply = await send(
        ctx,
        HttpCall(
            method=method,
            url=str(url),
            headers=headers,
            content=content,
            mutating=mutating,
            timeout_seconds=inputs.timeout_seconds,
            follow_redirects=inputs.follow_redirects,
            max_redirects=inputs.max_redirects,
            max_response_bytes=inputs.max_response_bytes,
            sensitive_headers=sensitive,
        ),
    )
    if reply.status not in inputs.accept_statuses:
        error = classify_http_status(reply.status, reply.headers, now=ctx.clock(), what=reply.what)
        if error is not None:
            raise ActionError(
                error.error_class, error.message + reply.snippet(), retry_after_seconds=error.retry_after_seconds
            )
    wanted = {name.lower() for name in inputs.response_headers}
    response = {
        "status": reply.status,
        "headers": {k: v for k, v in reply.headers.items() if k.lower() in wanted},
        "body": None if method == "HEAD" else decode_body(reply, inputs.response_format),
    }
    if inputs.select is not None:
        return ActionResult(output=evaluate(inputs.select, {"response": response}, "select"))
    return ActionResult(output=HttpResponseOutput.model_validate(response))


def _query_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


SPEC = ActionSpec(
    name="http.request",
    summary="Call an HTTP API (any method; JSON, form or raw body; SSRF-guarded)",
    input_model=HttpRequestInput,
    output_model=HttpResponseOutput,
    run=run_http_request,
    credential=CredentialRequirement(type="http-auth", required_keys=(), optional=True),
    mutating_for=is_mutating_request,
    idempotency=IDEMPOTENCY_KEY_HEADER,
    default_retry=RetryDefaults(limit=3, base_delay_seconds=1.0, max_delay_seconds=60.0),
    rate_limit_hint="provider-specific; 429 and Retry-After are honoured",
    shrink_hint="set `with.select` to a CEL expression that keeps only what later steps need "
    "(for example `response.body.items.map(i, i.id)`)",
    destinations_for=url_input_destinations("url"),
)

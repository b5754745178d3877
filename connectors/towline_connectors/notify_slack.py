"""`notify.slack`: post a message through a Slack incoming webhook.

The webhook URL is itself the secret, so it comes from a credential and is only
ever named as "the Slack webhook" in messages. It may only point at
hooks.slack.com unless the step's allowHosts says otherwise, which keeps the
declared destination honest. This module must never print the URL.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass, classify_http_status
from towline_connectors.httpcall import HttpCall, HttpReply, parse_url, send
from towline_connectors.httpxlib import httpx
from towline_connectors.models import CredentialRef, InputModel, OutputModel
from towline_connectors.spec import ActionResult, ActionSpec, CredentialRequirement, Destination, Inputs, RetryDefaults

SLACK_WEBHOOK_HOST = "hooks.slack.com"
DEFAULT_WEBHOOK = CredentialRef(credential="slack", key="url")
_LABEL = "the Slack webhook"
# Slack's answers that mean the URL itself is dead: a credential to repair.
_REVOKED_CODES = frozenset({"no_service", "invalid_token", "no_team", "team_disabled", "no_active_hooks"})


class SlackInput(InputModel):
    """`with:` of notify.slack."""

    text: str = Field(min_length=1, max_length=40000, description="Message text (Slack mrkdwn).")
    blocks: list[dict[str, Any]] | None = Field(default=None, description="Block Kit blocks; `text` is the fallback.")
    webhook: CredentialRef = Field(default=DEFAULT_WEBHOOK, description="Credential key holding the webhook URL.")
    timeout_seconds: float = Field(default=15.0, gt=0, le=120)


class SlackOutput(OutputModel):
    delivered: bool
    status: int


def _slack_error(reply: HttpReply, now: float) -> ActionError | None:
    code = reply.head(100)
    if reply.status in (403, 404) and code in _REVOKED_CODES:
        return ActionError(
            ErrorClass.AUTH, f"{_LABEL} was revoked or is wrong ({code}); put a current webhook URL in the Secret"
        )
    if reply.status == 410:
        return ActionError(ErrorClass.PERMANENT, f"{_LABEL}: the channel is archived ({code})")
    if 300 <= reply.status < 400:
        return ActionError(ErrorClass.PERMANENT, f"{_LABEL} answered with a redirect (HTTP {reply.status})")
    error = classify_http_status(reply.status, reply.headers, now=now, what=_LABEL)
    if error is not None and error.error_class is ErrorClass.PERMANENT:
        return ActionError(ErrorClass.PERMANENT, f"{error.message}{reply.snippet()}")
    return error


async def run_slack(inputs: SlackInput, ctx: ActionContext) -> ActionResult:
    url = ctx.secret(inputs.webhook)
    parse_url(url, _LABEL)
    ctx.register_secret(str(httpx.URL(url)))  # the normalised form httpx might print
    guard = ctx.guard.with_rules(ctx.guard.rules.with_default_hosts([SLACK_WEBHOOK_HOST]))
    message: dict[str, Any] = {"text": inputs.text}
    if inputs.blocks is not None:
        message["blocks"] = inputs.blocks
    reply = await send(
        ctx,
        HttpCall(
            method="POST",
            url=url,
            headers={"Content-Type": "application/json"},
            content=json.dumps(message, ensure_ascii=False).encode(),
            mutating=True,
            timeout_seconds=inputs.timeout_seconds,
            follow_redirects=False,
            max_response_bytes=64 * 1024,
            label=_LABEL,
        ),
        guard=guard,
    )
    error = _slack_error(reply, ctx.clock())
    if error is not None:
        raise error
    return ActionResult(output=SlackOutput(delivered=True, status=reply.status))


def slack_destinations(_inputs: Inputs) -> list[Destination]:
    return [Destination(SLACK_WEBHOOK_HOST, 443)]


def slack_credential_refs(inputs: Inputs) -> list[tuple[str, str]]:
    ref = inputs.get("webhook")
    if isinstance(ref, dict) and isinstance(ref.get("credential"), str) and isinstance(ref.get("key"), str):
        return [(ref["credential"], ref["key"])]
    return [(DEFAULT_WEBHOOK.credential, DEFAULT_WEBHOOK.key)]


SPEC = ActionSpec(
    name="notify.slack",
    summary="Post a message to Slack through an incoming webhook (URL from a credential)",
    input_model=SlackInput,
    output_model=SlackOutput,
    run=run_slack,
    credential=CredentialRequirement(type="slack-incoming-webhook", required_keys=(DEFAULT_WEBHOOK.key,)),
    default_retry=RetryDefaults(limit=3, base_delay_seconds=2.0, max_delay_seconds=60.0),
    rate_limit_hint="Slack allows about 1 message per second per webhook",
    destinations_for=slack_destinations,
    credential_refs_for=slack_credential_refs,
)

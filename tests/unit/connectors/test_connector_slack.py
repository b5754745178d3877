"""notify.slack against a loopback stand-in for hooks.slack.com."""

from __future__ import annotations

import pytest
from connector_testkit import LOOPBACK_RULES, LoopbackHTTPServer, Reply, make_ctx, output_of, run_action

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.netguard import NetworkRules

HOOK_PATH = "/services/T000/B000/XyZsecretPart"
TEST_HOST_RULES = NetworkRules(allow_hosts=("hooks.slack.test",), allow_private=LOOPBACK_RULES.allow_private)


def _ctx(server: LoopbackHTTPServer, rules: NetworkRules = TEST_HOST_RULES) -> ActionContext:
    url = server.url(HOOK_PATH, host="hooks.slack.test")
    return make_ctx(credentials={"slack": {"url": url}}, rules=rules, hosts={"hooks.slack.test": ["127.0.0.1"]})


def test_message_is_posted_to_the_webhook_from_the_credential(http_server: LoopbackHTTPServer) -> None:
    http_server.routes[HOOK_PATH] = Reply(200, "ok")
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*done*"}}]
    result = run_action("notify.slack", {"text": "run finished", "blocks": blocks}, _ctx(http_server))
    assert http_server.requests[0].json() == {"text": "run finished", "blocks": blocks}
    assert output_of(result) == {"delivered": True, "status": 200}


def test_webhook_url_outside_hooks_slack_com_is_refused_without_allow_hosts(
    http_server: LoopbackHTTPServer,
) -> None:
    ctx = _ctx(http_server, rules=LOOPBACK_RULES)
    with pytest.raises(ActionError, match=r"allowHosts \(hooks\.slack\.com\)") as caught:
        run_action("notify.slack", {"text": "hi"}, ctx)
    assert "XyZsecretPart" not in caught.value.message
    assert http_server.requests == []


def test_revoked_webhook_is_an_auth_error(http_server: LoopbackHTTPServer) -> None:
    http_server.routes[HOOK_PATH] = Reply(404, "no_service")
    with pytest.raises(ActionError, match="revoked") as caught:
        run_action("notify.slack", {"text": "hi"}, _ctx(http_server))
    assert caught.value.error_class is ErrorClass.AUTH


def test_archived_channel_is_permanent(http_server: LoopbackHTTPServer) -> None:
    http_server.routes[HOOK_PATH] = Reply(410, "channel_is_archived")
    with pytest.raises(ActionError) as caught:
        run_action("notify.slack", {"text": "hi"}, _ctx(http_server))
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_slack_rate_limit_carries_retry_after(http_server: LoopbackHTTPServer) -> None:
    http_server.routes[HOOK_PATH] = Reply(429, "rate_limited", headers={"Retry-After": "3"})
    with pytest.raises(ActionError) as caught:
        run_action("notify.slack", {"text": "hi"}, _ctx(http_server))
    assert (caught.value.error_class, caught.value.retry_after_seconds) == (ErrorClass.RATE_LIMIT, 3.0)


def test_bad_payload_error_names_the_webhook_not_its_url(http_server: LoopbackHTTPServer) -> None:
    http_server.routes[HOOK_PATH] = Reply(400, "invalid_blocks")
    with pytest.raises(ActionError, match="the Slack webhook failed with HTTP 400: invalid_blocks") as caught:
        run_action("notify.slack", {"text": "hi"}, _ctx(http_server))
    assert "XyZsecretPart" not in caught.value.message

"""notify.email against a minimal SMTP server on loopback (STARTTLS and TLS with a throwaway CA)."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Iterator

import pytest
from connector_testkit import LOOPBACK_RULES, TLSMaterial, make_ctx, output_of, run_action
from smtp_testkit import LoopbackSMTPServer, SMTPBehaviour

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.netguard import NetworkRules
from towline_connectors.registry import validate_inputs

USERS = {"mailer": "sm7p-pa55"}
CREDENTIALS = {"smtp": {"username": "mailer", "password": "sm7p-pa55"}}
HOSTS = {"smtp.example.test": ["127.0.0.1"]}


@pytest.fixture
def starttls_server(tls: TLSMaterial) -> Iterator[LoopbackSMTPServer]:
    server = LoopbackSMTPServer(SMTPBehaviour(users=dict(USERS)), starttls=tls.server_context())
    yield server
    server.close()


def _inputs(server: LoopbackSMTPServer, **overrides: object) -> dict[str, object]:
    inputs: dict[str, object] = {
        "host": "smtp.example.test",
        "port": server.port,
        "from": "Towline <towline@example.test>",
        "to": ["ops@example.test"],
        "bcc": ["audit@example.test"],
        "subject": "renewal-watch succeeded",
        "text": "All 3 tasks created.",
        "auth": {"credential": "smtp"},
    }
    inputs.update(overrides)
    return inputs


def _ctx(tls: TLSMaterial, *, idempotency_key: str = "k", rules: NetworkRules = LOOPBACK_RULES) -> ActionContext:
    return make_ctx(
        credentials=CREDENTIALS,
        hosts=HOSTS,
        ssl_context=tls.client_context(),
        idempotency_key=idempotency_key,
        rules=rules,
    )


def test_mail_is_sent_over_starttls_after_login(starttls_server: LoopbackSMTPServer, tls: TLSMaterial) -> None:
    result = run_action("notify.email", _inputs(starttls_server), _ctx(tls))
    received = starttls_server.received[0]
    assert (received.tls, received.user, received.sender) == (True, "mailer", "towline@example.test")
    assert received.recipients == ["ops@example.test", "audit@example.test"]
    message = email.message_from_bytes(received.data, policy=email.policy.default)
    assert message["Subject"] == "renewal-watch succeeded"
    assert message["Bcc"] is None
    assert message.get_content().strip() == "All 3 tasks created."
    assert output_of(result)["accepted"] == ["ops@example.test", "audit@example.test"]


def test_message_id_is_derived_from_the_idempotency_key(starttls_server: LoopbackSMTPServer, tls: TLSMaterial) -> None:
    first = run_action("notify.email", _inputs(starttls_server), _ctx(tls, idempotency_key="k-1"))
    again = run_action("notify.email", _inputs(starttls_server), _ctx(tls, idempotency_key="k-1"))
    message = email.message_from_bytes(starttls_server.received[0].data, policy=email.policy.default)
    assert output_of(first)["messageId"] == output_of(again)["messageId"] == message["Message-ID"]


def test_mail_is_sent_over_implicit_tls(tls: TLSMaterial) -> None:
    server = LoopbackSMTPServer(SMTPBehaviour(users=dict(USERS)), implicit_tls=tls.server_context())
    try:
        run_action("notify.email", _inputs(server, security="tls"), _ctx(tls))
        assert server.received[0].tls
        assert server.received[0].user == "mailer"
    finally:
        server.close()


def test_plain_relay_without_auth_works_when_chosen_explicitly(smtp_server: LoopbackSMTPServer) -> None:
    inputs = _inputs(smtp_server, security="none", auth=None)
    run_action("notify.email", inputs, make_ctx(hosts=HOSTS))
    assert (smtp_server.received[0].tls, smtp_server.received[0].user) == (False, None)


def test_wrong_password_is_an_auth_error(starttls_server: LoopbackSMTPServer, tls: TLSMaterial) -> None:
    ctx = make_ctx(
        credentials={"smtp": {"username": "mailer", "password": "wrong"}},
        hosts=HOSTS,
        ssl_context=tls.client_context(),
    )
    with pytest.raises(ActionError, match="rejected the login") as caught:
        run_action("notify.email", _inputs(starttls_server), ctx)
    assert caught.value.error_class is ErrorClass.AUTH
    assert starttls_server.received == []


def test_server_without_starttls_is_refused_rather_than_downgraded(
    smtp_server: LoopbackSMTPServer, tls: TLSMaterial
) -> None:
    with pytest.raises(ActionError, match="does not offer STARTTLS") as caught:
        run_action("notify.email", _inputs(smtp_server), _ctx(tls))
    assert caught.value.error_class is ErrorClass.PERMANENT
    assert smtp_server.received == []


def test_certificate_for_another_name_is_refused(starttls_server: LoopbackSMTPServer, tls: TLSMaterial) -> None:
    ctx = make_ctx(credentials=CREDENTIALS, hosts={"mail.other.test": ["127.0.0.1"]}, ssl_context=tls.client_context())
    with pytest.raises(ActionError, match="certificate verification failed") as caught:
        run_action("notify.email", _inputs(starttls_server, host="mail.other.test"), ctx)
    assert caught.value.error_class is ErrorClass.PERMANENT


def test_partly_refused_recipients_are_reported(tls: TLSMaterial) -> None:
    behaviour = SMTPBehaviour(users=dict(USERS), refuse_recipients={"audit@example.test": "550 no such user"})
    server = LoopbackSMTPServer(behaviour, starttls=tls.server_context())
    try:
        result = output_of(run_action("notify.email", _inputs(server), _ctx(tls)))
    finally:
        server.close()
    assert result["accepted"] == ["ops@example.test"]
    assert result["refused"] == {"audit@example.test": "550 no such user"}


@pytest.mark.parametrize(("reply", "expected"), [("550 no", ErrorClass.PERMANENT), ("451 later", ErrorClass.TRANSIENT)])
def test_every_recipient_refused_is_classified_by_reply_code(
    reply: str, expected: ErrorClass, tls: TLSMaterial
) -> None:
    refusals = {"ops@example.test": reply, "audit@example.test": reply}
    server = LoopbackSMTPServer(
        SMTPBehaviour(users=dict(USERS), refuse_recipients=refusals), starttls=tls.server_context()
    )
    try:
        with pytest.raises(ActionError) as caught:
            run_action("notify.email", _inputs(server), _ctx(tls))
    finally:
        server.close()
    assert caught.value.error_class is expected


def test_connection_lost_after_data_is_an_unknown_side_effect(tls: TLSMaterial) -> None:
    behaviour = SMTPBehaviour(users=dict(USERS), drop_after_data=True)
    server = LoopbackSMTPServer(behaviour, starttls=tls.server_context())
    try:
        with pytest.raises(ActionError, match="may have been delivered") as caught:
            run_action("notify.email", _inputs(server), _ctx(tls))
    finally:
        server.close()
    assert caught.value.error_class is ErrorClass.UNKNOWN_SIDE_EFFECT


def test_smtp_host_on_loopback_is_refused_without_opt_in(starttls_server: LoopbackSMTPServer, tls: TLSMaterial) -> None:
    with pytest.raises(ActionError, match="loopback address") as caught:
        run_action("notify.email", _inputs(starttls_server), _ctx(tls, rules=NetworkRules()))
    assert caught.value.error_class is ErrorClass.PERMANENT
    assert starttls_server.received == []


def test_password_over_an_unencrypted_connection_is_a_validation_error() -> None:
    problems = validate_inputs(
        "notify.email",
        {
            "host": "smtp.example.com",
            "security": "none",
            "from": "a@b.c",
            "to": ["d@e.f"],
            "subject": "s",
            "text": "t",
            "auth": {"credential": "smtp"},
        },
    )
    assert problems == ["with: auth over an unencrypted connection is refused; use security: starttls or tls"]


def test_header_injection_in_an_address_is_rejected() -> None:
    problems = validate_inputs(
        "notify.email",
        {
            "host": "smtp.example.com",
            "from": "a@b.c",
            "to": ["x@y.z\r\nBcc: victim@example.com"],
            "subject": "s",
            "text": "t",
        },
    )
    assert len(problems) == 1
    assert problems[0].startswith("with.to[0]:")

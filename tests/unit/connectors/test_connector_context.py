"""ActionContext is the step kit's view of an attempt (StepContext), plus what only the runner gives an action."""

from __future__ import annotations

import pytest
from connector_testkit import make_ctx

from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.models import CredentialRef
from towline_step.attempt import StepContext


def test_an_action_context_answers_as_the_sdks_context_does() -> None:
    ctx = make_ctx(credentials={"crm": {"token": "t0ken"}}, idempotency_key="wf-run-step-1", deadline_seconds=30.0)
    view: StepContext = ctx
    assert isinstance(view, StepContext) and view.idempotency_key == "wf-run-step-1"
    remaining = view.remaining_seconds()
    assert remaining is not None and 0 < remaining <= 30.0
    assert view.optional_credential("crm", "token") == ctx.secret(CredentialRef(credential="crm", key="token"))
    assert (view.optional_credential("crm", "other"), view.optional_credential("mail", "token")) == (None, None)


def test_a_credential_the_action_needs_and_the_step_did_not_mount_names_the_fix() -> None:
    ctx = make_ctx(credentials={"crm": {"token": "t0ken"}})
    with pytest.raises(ActionError) as raised:
        ctx.secret(CredentialRef(credential="mail", key="token"))
    assert raised.value.error_class is ErrorClass.VALIDATION
    assert "add it to the step's `credentials` map" in raised.value.message

"""@step and Context: a declaration is checked when the module loads; a step reads only what it declared."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from towline_step import AuthError, Context, CredentialSlot, PermanentError, step
from towline_step.attempt import Deadline, StepContext
from towline_step.context import StepEnvironment, load_credentials, read_environment
from towline_step.protocol import step_environment
from towline_step.redact import Redactor


class In(BaseModel):
    name: str


class Out(BaseModel):
    greeting: str


def hello(inputs: In, ctx: Context) -> Out:
    """Says hello.

    A longer explanation that the catalog does not need.
    """
    return Out(greeting=f"hello {inputs.name}")


def test_the_models_come_from_the_type_hints_and_calling_the_step_calls_the_function() -> None:
    declared = step(name="hello", image="registry.example/hello:1")(hello)
    assert (declared.input_model, declared.output_model) == (In, Out)
    assert declared(In(name="ada"), Context()) == Out(greeting="hello ada")


def test_the_description_defaults_to_the_docstrings_first_paragraph() -> None:
    assert step(name="hello", image="i")(hello).description == "Says hello."
    assert step(name="hello", image="i", description="Greets.")(hello).description == "Greets."


def test_credentials_are_slots_with_keys_in_either_form() -> None:
    short = step(name="hello", image="i", credentials={"api": ["token", "user"]})(hello)
    long = step(name="hello", image="i", credentials=[CredentialSlot("api", ("token", "user"), "The API.")])(hello)
    assert short.credentials == (CredentialSlot("api", ("token", "user")),)
    assert long.credentials[0].description == "The API."
    assert short.declared_credentials() == {("api", "token"), ("api", "user")}


def test_egress_ports_are_sorted_and_unique() -> None:
    assert step(name="hello", image="i", egress_ports=[8443, 443, 443])(hello).egress_ports == (443, 8443)


@pytest.mark.parametrize(("options", "says"), [
    ({"name": "Hello_World"}, "must be a Kubernetes object name"),
    ({"name": "x" * 254}, "must be a Kubernetes object name"),
    ({"image": "has space:1"}, "image reference without spaces"),
    ({"image": ""}, "image reference without spaces"),
    ({"credentials": {"API": ["token"]}}, "match [a-z][a-z0-9_]{0,62} (a step binds a slot under its name in "
                                          "credentials, so no -), not 'API'"),
    ({"credentials": {"deploy-api": ["token"]}}, "so no -), not 'deploy-api'"),
    ({"credentials": {"api": []}}, "must list the Secret keys it needs"),
    ({"credentials": {"api": "token"}}, "must list the Secret keys it needs"),
    ({"credentials": {"api": ["../etc"]}}, "'../etc' is not a Secret key name"),
    ({"credentials": {"api": [".."]}}, "'..' is not a Secret key name"),
    ({"credentials": [CredentialSlot("api", ("a",)), CredentialSlot("api", ("b",))]}, "unique"),
    ({"egress_ports": [0]}, "TCP port numbers 1-65535, not 0"),
    ({"egress_ports": [True]}, "TCP port numbers 1-65535, not True"),
    ({"timeout_seconds": 0}, "positive number of seconds"),
])
def test_a_declaration_the_api_would_refuse_fails_when_the_module_loads(options: dict[str, Any], says: str) -> None:
    arguments: dict[str, Any] = {"name": "hello", "image": "registry.example/hello:1", **options}
    with pytest.raises(ValueError, match=re.escape(says)):
        step(**arguments)


def untyped(inputs, ctx):  # type: ignore[no-untyped-def]
    return inputs


def returns_dict(inputs: In, ctx: Context) -> dict[str, str]:
    return {}


def one_parameter(inputs: In) -> Out:
    return Out(greeting="")


@pytest.mark.parametrize(("function", "says"), [
    (untyped, "annotate its first parameter with a pydantic BaseModel subclass"),
    (returns_dict, "annotate its return value with a pydantic BaseModel subclass"),
    (one_parameter, r"must take exactly \(inputs, ctx\), not 1 parameters"),
])
def test_a_function_without_models_is_refused_naming_the_fix(function: Any, says: str) -> None:
    with pytest.raises(TypeError, match=says):
        step(name="hello", image="i")(function)


def test_a_bound_credential_is_read_by_slot_and_key() -> None:
    ctx = Context(credentials={("api", "token"): "t0k3n-value"}, declared={("api", "token")})
    assert ctx.credential("api", "token") == "t0k3n-value"
    assert ctx.optional_credential("api", "token") == "t0k3n-value"


def test_an_unbound_credential_is_an_auth_failure_or_none() -> None:
    ctx = Context(declared={("api", "token")})
    assert ctx.optional_credential("api", "token") is None
    with pytest.raises(AuthError, match=r"credential slot 'api' has no key 'token' mounted.*credentials: \{api:"):
        ctx.credential("api", "token")


def test_reading_an_undeclared_credential_is_a_bug_the_step_reports() -> None:
    ctx = Context(credentials={("other", "token"): "x"}, declared={("api", "token")})
    with pytest.raises(PermanentError, match="does not declare"):
        ctx.optional_credential("other", "token")


def test_remaining_seconds_counts_down_from_the_budget_with_the_given_clock() -> None:
    now = [100.0]
    ctx = Context(budget_seconds=30.0, clock=lambda: now[0])
    now[0] = 112.5
    assert ctx.remaining_seconds() == 17.5
    now[0] = 200.0
    assert ctx.remaining_seconds() == 0.0
    assert Context().remaining_seconds() is None


def test_usage_adds_up() -> None:
    ctx = Context()
    ctx.record_usage("tokens", 10)
    ctx.record_usage("tokens", 5)
    assert ctx.usage == {"tokens": 15}


def test_credentials_load_from_slot_directories_skipping_the_volumes_own_entries(tmp_path: Any) -> None:
    (tmp_path / "api" / "..2026_12_01").mkdir(parents=True)
    (tmp_path / "api" / "..2026_12_01" / "token").write_text("hidden")
    (tmp_path / "api" / "token").write_text("value-one\n")
    (tmp_path / "..data").mkdir()
    redactor = Redactor()
    assert load_credentials(tmp_path, redactor) == {("api", "token"): "value-one\n"}
    assert redactor.redact("got value-one") == "got [REDACTED]"
    assert load_credentials(tmp_path / "absent", Redactor()) == {}


def test_the_environment_the_harness_writes_reads_back_as_it_was_written(tmp_path: Path) -> None:
    written = StepEnvironment(inputs_path=tmp_path / "inputs.json", credentials_dir=tmp_path / "credentials",
                              result_path=tmp_path / "result", idempotency_key="wf-run-step-1", deadline_seconds=42.5,
                              allow_hosts=("api.example.com",), step_type="steptype/hello")
    assert read_environment(written.environ()) == written
    local = StepEnvironment(inputs_path=tmp_path / "i", credentials_dir=tmp_path / "c", result_path=tmp_path / "r")
    assert read_environment(local.environ()) == local

    # What the operator writes into a step type's pod is the same writer: whole seconds as a whole number
    # (a Rust or Go step may parse an integer), compact JSON, unset values left out.
    pod = step_environment(allow_hosts=["a.example.com"], step_type="steptype/x", deadline_seconds=1_000_000)
    assert pod["TOWLINE_DEADLINE_SECONDS"] == "1000000" and pod["TOWLINE_ALLOW_HOSTS"] == '["a.example.com"]'
    assert "TOWLINE_IDEMPOTENCY_KEY" not in pod and read_environment(pod).deadline_seconds == 1_000_000


def test_the_sdk_and_the_runner_share_one_view_of_an_attempt() -> None:
    now = [10.0]
    deadline = Deadline.after(5.0, lambda: now[0])
    ctx = Context(credentials={("api", "token"): "t0ken"}, budget_seconds=5.0, clock=lambda: now[0])
    now[0] = 13.0
    assert isinstance(ctx, StepContext)
    assert ctx.remaining_seconds() == deadline.remaining() == 2.0
    assert (ctx.optional_credential("api", "token"), ctx.optional_credential("api", "other")) == ("t0ken", None)

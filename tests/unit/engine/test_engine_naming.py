"""Deterministic names, idempotency keys and retry delays."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from towline.api.common import IDENTIFIER_PATTERN
from towline.api.workflow import RetryPolicy
from towline.engine import approval_name, gate_id, idempotency_key, job_name
from towline.engine.naming import STEP_JOB_PREFIX
from towline.engine.retry import jitter_seed, may_retry, retry_delay_seconds

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
run_names = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?", fullmatch=True)
step_ids = st.from_regex(IDENTIFIER_PATTERN, fullmatch=True)


def test_job_name_joins_run_step_and_attempt() -> None:
    assert job_name("renewal-watch-20261130-0800", "load_accounts", 2) == (
        "towline-step-renewal-watch-20261130-0800-load--accounts-2")


@pytest.mark.parametrize(("first", "second"), [
    (("a.b", "c"), ("a-b", "c")),                     # '.' is not a DNS label character
    (("x", "a_b"), ("x-a", "b")),                     # '_' must not read as the separator
    (("x", "a__b"), ("x-a", "b")),
    (("r", "a_1234567890"), ("r-a", "x")),
], ids=["dot-in-run", "underscore-in-step", "double-underscore", "digits-after-underscore"])
def test_names_of_different_runs_and_steps_never_collide(first: tuple[str, str], second: tuple[str, str]) -> None:
    assert job_name(*first, 1) != job_name(*second, 1)
    assert approval_name(*first) != approval_name(*second)


@given(run_names, step_ids, run_names, step_ids)
def test_children_names_are_unique_per_run_and_step(run: str, step: str, other_run: str, other_step: str) -> None:
    if (run, step) != (other_run, other_step):
        assert approval_name(run, step) != approval_name(other_run, other_step)
        assert job_name(run, step, 1) != job_name(other_run, other_step, 1)


def test_a_hashed_name_never_takes_a_readable_names_form() -> None:
    hashed = approval_name("a.b", "c")
    prefix, digits = hashed.rsplit("-", 1)
    assert digits.isdigit() and not prefix.endswith("-")
    # The only readable names ending in digits spell a '_' before them, i.e. '--'.
    assert approval_name("r", "a_1") == "r-a--1"


@given(run_names, step_ids, st.integers(min_value=1, max_value=10_000))
def test_job_name_is_a_dns_label_that_keeps_the_attempt(run: str, step: str, attempt: int) -> None:
    name = job_name(run, step, attempt)
    assert len(name) <= 63
    assert DNS_LABEL.match(name)
    assert name.startswith(STEP_JOB_PREFIX)
    assert name.endswith(f"-{attempt}")


def test_long_job_names_are_shortened_with_a_hash_and_stay_distinct() -> None:
    run = "a-very-long-run-name-generated-from-a-webhook-delivery-id-0123456789"
    first, second = job_name(run, "create_tasks_in_crm", 1), job_name(run, "create_tasks_in_erp", 1)
    assert len(first) <= 63 and len(second) <= 63
    assert first != second


def test_job_name_is_the_same_every_time() -> None:
    assert job_name("run", "step", 3) == job_name("run", "step", 3)


@given(run_names, step_ids)
def test_approval_name_is_a_dns_label(run: str, step: str) -> None:
    name = approval_name(run, step)
    assert len(name) <= 63 and DNS_LABEL.match(name)


def test_approval_name_matches_the_documented_form() -> None:
    assert approval_name("renewal-watch-20261130-0800", "review") == "renewal-watch-20261130-0800-review"


@given(step_ids)
def test_gate_id_is_a_valid_step_identifier(step: str) -> None:
    assert re.fullmatch(IDENTIFIER_PATTERN, gate_id(step))
    assert gate_id(step).endswith("__approval")


def test_idempotency_key_is_stable_across_calls() -> None:
    assert idempotency_key("wf", "uid-1", "create", 0) == idempotency_key("wf", "uid-1", "create", 0)
    assert idempotency_key("wf", "uid-1", "create", 0).startswith("tl-")


def test_idempotency_key_changes_with_attempt_group_run_and_step() -> None:
    base = idempotency_key("wf", "uid-1", "create", 0)
    assert base != idempotency_key("wf", "uid-1", "create", 1)
    assert base != idempotency_key("wf", "uid-2", "create", 0)
    assert base != idempotency_key("wf", "uid-1", "other", 0)


@given(st.integers(min_value=1, max_value=60), st.integers(min_value=0, max_value=2**63))
def test_exponential_delay_is_full_jitter_under_the_cap(attempt: int, seed: int) -> None:
    policy = RetryPolicy(limit=5, base_delay_seconds=2, max_delay_seconds=300)
    delay = retry_delay_seconds(policy, attempt, seed=seed)
    assert 0 <= delay <= min(300, 2 * 2 ** (attempt - 1))


def test_jitter_is_the_same_for_the_same_run_step_and_attempt() -> None:
    policy = RetryPolicy(limit=5)
    first = retry_delay_seconds(policy, 3, seed=jitter_seed("uid", "a", 3))
    assert first == retry_delay_seconds(policy, 3, seed=jitter_seed("uid", "a", 3))
    assert first != retry_delay_seconds(policy, 3, seed=jitter_seed("uid", "b", 3))


def test_fixed_backoff_waits_the_base_delay() -> None:
    policy = RetryPolicy(limit=2, backoff="fixed", base_delay_seconds=7)
    assert retry_delay_seconds(policy, 4, seed=1) == 7


def test_retry_after_wins_even_over_the_cap() -> None:
    policy = RetryPolicy(limit=2, max_delay_seconds=60)
    assert retry_delay_seconds(policy, 1, seed=1, retry_after_seconds=600) == 600


def test_retry_only_for_listed_classes_with_attempts_left() -> None:
    policy = RetryPolicy(limit=2)
    assert may_retry(policy, 1, "transient", None)
    assert may_retry(policy, 2, "rate_limit", True)
    assert not may_retry(policy, 3, "transient", None)
    assert not may_retry(policy, 1, "permanent", None)
    assert not may_retry(policy, 1, "transient", False)
    assert not may_retry(None, 1, "transient", None)

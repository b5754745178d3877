"""Retries per error class, backoff, Retry-After, deadlines, timeouts, vanished Jobs, auth pauses."""

from __future__ import annotations

from datetime import timedelta

from engine_harness import FakeCatalog, Sim, action, workflow

from towline.api.workflow import RetryPolicy
from towline.engine import HISTORY_LIMIT, job_name

RETRY = {"limit": 3, "baseDelaySeconds": 10, "maxDelaySeconds": 300}


def test_transient_failure_is_scheduled_for_retry_with_wake_up_in_status() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "transient")
    decision = sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.reason) == ("Retrying", "RetryScheduled")
    assert step.retry_at is not None and sim.now <= step.retry_at <= sim.now + timedelta(seconds=10)
    assert sim.phase == "RetryScheduled"
    assert decision.wake_at == sim.status.wake_at == step.retry_at
    assert sim.events("StepRetryScheduled")


def test_retry_starts_the_next_attempt_only_at_retry_at() -> None:
    sim = Sim(workflow([action("a", retry={**RETRY, "backoff": "fixed"})]))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    sim.advance(9)
    sim.reconcile()
    assert len(sim.created) == 1
    sim.advance(1)
    sim.reconcile()
    assert [(j.attempt, j.job_name) for j in sim.created][-1] == (2, job_name(sim.name, "a", 2))
    assert sim.phase_of("a") == "Running"


def test_retries_stop_after_the_limit() -> None:
    sim = Sim(workflow([action("a", retry={**RETRY, "limit": 2, "backoff": "fixed", "baseDelaySeconds": 1})]))
    sim.reconcile()
    for _ in range(3):
        sim.fail("a", "transient")
        sim.reconcile()
        sim.advance(1)
        sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.reason, step.attempt) == ("Failed", "RetriesExhausted", 3)
    assert len(sim.created) == 3 and sim.phase == "Failed"


def test_permanent_failure_is_not_retried() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "permanent")
    sim.reconcile()
    assert sim.phase_of("a") == "Failed" and len(sim.created) == 1


def test_result_marked_not_retryable_is_not_retried() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "transient", retryable=False)
    sim.reconcile()
    assert sim.phase_of("a") == "Failed"


def test_catalog_default_retry_applies_when_the_step_sets_none() -> None:
    sim = Sim(workflow([action("a")]), catalog=FakeCatalog({"http.request": RetryPolicy(limit=1)}))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    assert sim.phase_of("a") == "Retrying"


def test_step_without_retry_policy_fails_at_once() -> None:
    sim = Sim(workflow([action("a")]))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    assert sim.phase_of("a") == "Failed"


def test_rate_limit_retry_waits_at_least_the_providers_retry_after() -> None:
    sim = Sim(workflow([action("a", retry={**RETRY, "maxDelaySeconds": 60})]))
    sim.reconcile()
    sim.fail("a", "rate_limit", retry_after=900)
    sim.reconcile()
    assert sim.step("a").retry_at == sim.now + timedelta(seconds=900)


def test_retry_that_would_outlive_the_run_deadline_fails_the_step() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)], policy={"runTimeoutSeconds": 600}))
    sim.reconcile()
    sim.advance(100)
    sim.fail("a", "rate_limit", retry_after=3600)
    sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.reason) == ("Failed", "RetryPastDeadline")
    assert "after the run deadline" in (step.message or "")
    assert sim.phase == "Failed"


def test_retried_attempt_keeps_the_idempotency_key() -> None:
    sim = Sim(workflow([{"id": "a", "action": "crm.update", "retry": {**RETRY, "backoff": "fixed"}}]))
    sim.reconcile()
    sim.fail("a", "transient")
    sim.reconcile()
    sim.advance(10)
    sim.reconcile()
    first, second = sim.created
    assert first.mutating and first.idempotency_key == second.idempotency_key
    assert first.job_name != second.job_name


def test_job_stopped_at_its_timeout_fails_as_timeout_and_is_retried() -> None:
    sim = Sim(workflow([action("a", timeoutSeconds=30, retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "timeout", message="the step ran past its timeoutSeconds and was stopped")
    sim.reconcile()
    assert sim.step("a").error_class == "timeout" and sim.phase_of("a") == "Retrying"


def test_vanished_job_of_a_mutating_step_is_an_unknown_side_effect() -> None:
    sim = Sim(workflow([{"id": "a", "action": "crm.update", "retry": RETRY}]))
    sim.reconcile()
    sim.vanish("a")
    sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.error_class) == ("Failed", "unknown_side_effect")
    assert "disappeared" in (step.message or "")


def test_vanished_job_of_a_read_only_step_is_retried_as_transient() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)]))
    sim.reconcile()
    sim.vanish("a")
    sim.reconcile()
    assert (sim.phase_of("a"), sim.step("a").error_class) == ("Retrying", "transient")


def test_failed_job_without_result_of_a_mutating_step_is_not_replayed() -> None:
    sim = Sim(workflow([{"id": "a", "action": "crm.update", "retry": RETRY}]))
    sim.reconcile()
    sim.finish("a", ok=False, result=False, reason="OOMKilled")
    sim.reconcile()
    assert (sim.phase_of("a"), sim.step("a").error_class) == ("Failed", "unknown_side_effect")
    assert "OOMKilled" in (sim.step("a").message or "")


def test_unknown_side_effect_is_never_retried_and_asks_for_reconciliation() -> None:
    sim = Sim(workflow([{"id": "a", "action": "crm.update", "retry": {**RETRY, "retryOn": ["unknown_side_effect"]}}]))
    sim.reconcile()
    sim.fail("a", "unknown_side_effect", message="connection reset after sending")
    sim.reconcile()
    assert (sim.phase_of("a"), sim.step("a").reason) == ("Failed", "SideEffectUnknown")
    assert len(sim.created) == 1 and sim.phase == "Failed"
    condition = sim.condition("NeedsReconciliation")
    assert condition.status == "True" and "a" in condition.message


def test_unknown_error_class_is_treated_as_permanent() -> None:
    sim = Sim(workflow([action("a", retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "kaboom")
    sim.reconcile()
    assert (sim.phase_of("a"), sim.step("a").error_class) == ("Failed", "permanent")


def test_history_keeps_the_last_ten_attempts() -> None:
    sim = Sim(workflow([action("a", retry={"limit": 14, "backoff": "fixed", "baseDelaySeconds": 1})]))
    sim.reconcile()
    for _ in range(14):
        sim.fail("a", "transient")
        sim.reconcile()
        sim.advance(1)
        sim.reconcile()
    history = sim.step("a").history
    assert len(history) == HISTORY_LIMIT
    assert [h.attempt for h in history] == list(range(5, 15))
    assert sim.step("a").attempt == 15


def test_auth_failure_pauses_the_run_asking_for_credential_repair() -> None:
    sim = Sim(workflow([action("a", credentials={"crm": "crm-api"}, retry=RETRY)]))
    sim.reconcile()
    sim.fail("a", "auth", message="401 from crm")
    decision = sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.paused_for_credentials, step.reason) == ("Failed", True, "CredentialsNeedRepair")
    assert sim.phase == "Waiting" and decision.wake_at is None
    condition = sim.condition("CredentialsNeedRepair")
    assert condition.status == "True" and "crm-api" in condition.message and "towline.dev/resume" in condition.message
    assert len(sim.created) == 1


def test_new_resume_token_retries_the_paused_step_with_a_new_attempt_group() -> None:
    sim = Sim(workflow([{"id": "a", "action": "crm.update", "credentials": {"crm": "crm-api"}}]))
    sim.reconcile()
    sim.fail("a", "auth")
    sim.reconcile()
    sim.resume_token = "1764489600"
    sim.reconcile()
    first, second = sim.created
    assert (second.attempt, sim.step("a").attempt_group) == (2, 1)
    assert first.idempotency_key != second.idempotency_key
    assert sim.status.resume_token == "1764489600"
    assert sim.condition("CredentialsNeedRepair").status == "False"
    sim.finish("a")
    sim.reconcile()
    assert sim.phase == "Succeeded"


def test_resume_token_set_before_the_failure_does_not_resume_it() -> None:
    sim = Sim(workflow([action("a")]))
    sim.resume_token = "old"
    sim.reconcile()
    sim.fail("a", "auth")
    sim.reconcile()
    sim.reconcile()
    assert sim.step("a").paused_for_credentials and len(sim.created) == 1


def test_auth_pause_waits_for_the_other_branches_too() -> None:
    sim = Sim(workflow([action("a"), action("b"), action("c", "b")]))
    sim.reconcile()
    sim.fail("a", "auth")
    sim.finish("b")
    sim.reconcile()
    assert sim.phase_of("c") == "Running" and sim.phase == "Running"

"""A hostile step (or remote server) cannot break a run's reconcile.

Whatever a step pod's termination message holds, the real observer
(`towline.k8s.observe.build_observed`) and the real `decide` never raise: the
attempt ends as a clear step failure or a retry due within
MAX_RETRY_AFTER_SECONDS, and the status they produce is JSON the API server
accepts. The engine clamps on its own too: any float `retry_after` reaching
`decide` directly becomes a bounded wake-up time.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from engine_harness import Sim, workflow
from hypothesis import given, note, settings
from hypothesis import strategies as st

from towline.engine import JobObservation
from towline.k8s.labels import ANNOTATION_STEP_ID, LABEL_ATTEMPT, LABEL_RUN
from towline.k8s.observe import build_observed
from towline_step.protocol import MAX_RETRY_AFTER_SECONDS, ErrorClass

RETRY_ALL = {"limit": 3, "baseDelaySeconds": 1, "maxDelaySeconds": 5,
             "retryOn": ["rate_limit", "transient", "timeout", "permanent", "validation", "output_too_large"]}
BIG = 300_000_000_000
RUNNER_IMAGE = "localhost/towline-runner:dev"

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["\ud800", "\udfff", "NaN", "300000000000", "1e400"]),
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
delays = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([BIG, -1, 0, "300", [1], {"s": 1}, True, None]),
)
fields = {
    "ok": st.one_of(st.booleans(), json_values),
    "output": json_values,
    "errorClass": st.one_of(st.sampled_from([*ErrorClass, "bogus", ""]), json_values),
    "message": st.one_of(st.text(max_size=40), json_values),
    "retryable": st.one_of(st.booleans(), json_values),
    "retryAfterSeconds": delays,
    "usage": st.one_of(st.dictionaries(st.text(max_size=8), json_values, max_size=3), json_values),
    "missingSecrets": st.one_of(st.lists(st.text(max_size=8), max_size=3), json_values),
    "version": st.one_of(st.just(1), json_values),
}
documents = st.fixed_dictionaries({}, optional=fields).map(lambda doc: json.dumps(doc, allow_nan=True))
raw_messages = st.one_of(
    st.integers(min_value=1, max_value=3000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(min_value=1, max_value=1200).map(lambda n: '{"ok":true,"output":' + "[" * n + "]" * n + "}"),
    st.sampled_from([
        '{"ok":false,"errorClass":"rate_limit","retryAfterSeconds":1e400}',
        '{"ok":false,"errorClass":"rate_limit","retryAfterSeconds":' + "9" * 5000 + "}",
        '{"ok":false,"errorClass":"rate_limit","retryAfterSeconds":-Infinity}',
        '{"ok":true,"output":"\\ud800"}', '{"ok":true,"output":{"\\udfff":1}}',
        '{"ok":true,"output":' + "1" * 400 + "}", '{"ok":true,"output":"' + "x" * 5000 + '"}',
        "exec /runner: no such file or directory", "", "null", "[]", '"ok"', "{}",
    ]),
    st.text(max_size=60),
)


def run_with_failed_attempt(message: str, *, ok_state: bool, **policy: Any) -> Sim:
    """A one-step run whose attempt-1 Job finished with `message` as its pod's termination message."""
    sim = Sim(workflow([{"id": "a", "action": "crm.update", "retry": RETRY_ALL}], policy=policy))
    sim.reconcile()
    created = sim.created[-1]
    job = {
        "metadata": {"name": created.job_name, "uid": "job-uid", "labels": {LABEL_RUN: sim.name, LABEL_ATTEMPT: "1"},
                     "annotations": {ANNOTATION_STEP_ID: "a"},
                     "ownerReferences": [{"kind": "WorkflowRun", "uid": sim.uid, "controller": True}]},
        "spec": {"template": {"spec": {"containers": [{"name": "step", "image": RUNNER_IMAGE}]}}},
        "status": {"conditions": [{"type": "Complete" if ok_state else "Failed", "status": "True"}]},
    }
    pod = {
        "metadata": {"name": f"{created.job_name}-x", "ownerReferences": [{"uid": "job-uid", "controller": True}]},
        # The pod ran exactly what its Job asked for, so its termination message is read as the result.
        "spec": {"containers": [{"name": "step", "image": RUNNER_IMAGE}]},
        "status": {"containerStatuses": [{"name": "step", "image": RUNNER_IMAGE,
                                          "state": {"terminated": {"exitCode": 0, "message": message}}}]},
    }
    observed = build_observed([job], [pod], [], run_name=sim.name, run_uid=sim.uid)
    sim.jobs[("a", 1)] = observed.jobs[("a", 1)]
    return sim


def assert_bounded_outcome(sim: Sim) -> None:
    step = sim.step("a")
    note(f"step: {step.phase} {step.reason} {step.message!r} retry_at={step.retry_at}")
    assert step.phase in ("Succeeded", "Failed", "Retrying")
    if step.phase == "Retrying":
        assert step.retry_at is not None
        assert sim.now <= step.retry_at <= sim.now + timedelta(seconds=MAX_RETRY_AFTER_SECONDS)
    if step.phase == "Failed":
        assert step.message and step.error_class in set(ErrorClass)
    # What towline.k8s writes: strict JSON (no NaN), encodable (no lone surrogates).
    json.dumps(sim.status.model_dump(mode="json", by_alias=True, exclude_none=True), allow_nan=False).encode()


@settings(max_examples=400, deadline=None)
@given(message=st.one_of(documents, raw_messages), ok_state=st.booleans())
def test_no_termination_message_breaks_observe_and_decide(message: str, ok_state: bool) -> None:
    note(f"message: {message[:300]!r}")
    sim = run_with_failed_attempt(message, ok_state=ok_state)
    sim.reconcile()
    assert_bounded_outcome(sim)


@settings(max_examples=200, deadline=None)
@given(retry_after=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                             st.integers(min_value=-(10**400), max_value=10**400)))
def test_decide_turns_any_retry_after_into_a_bounded_wake_up(retry_after: Any) -> None:
    sim = Sim(workflow([{"id": "a", "action": "crm.update", "retry": RETRY_ALL}]))
    sim.reconcile()
    sim.fail("a", "rate_limit", retry_after=retry_after)
    sim.reconcile()
    assert sim.phase_of("a") == "Retrying"
    assert_bounded_outcome(sim)


def test_a_retry_after_of_300000000000_seconds_waits_the_documented_maximum() -> None:
    sim = run_with_failed_attempt(
        json.dumps({"ok": False, "errorClass": "rate_limit", "message": "HTTP 429", "retryAfterSeconds": BIG}),
        ok_state=False,
    )
    sim.reconcile()
    assert sim.phase_of("a") == "Retrying"
    assert sim.step("a").retry_at == sim.now + timedelta(seconds=MAX_RETRY_AFTER_SECONDS)


def test_a_retry_after_past_the_run_deadline_fails_the_step_instead() -> None:
    sim = run_with_failed_attempt(
        json.dumps({"ok": False, "errorClass": "rate_limit", "retryAfterSeconds": BIG}), ok_state=False,
        runTimeoutSeconds=3600,
    )
    sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.reason, step.retry_at) == ("Failed", "RetryPastDeadline", None)
    assert "would start after the run deadline" in (step.message or "")


def test_a_string_ok_is_a_failure_not_a_success() -> None:
    sim = run_with_failed_attempt('{"ok":"false","output":{"forged":true}}', ok_state=True)
    sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.output) == ("Failed", None)
    assert "'ok' must be true or false, not a string" in (step.message or "")


def test_the_observer_hands_decide_only_checked_values() -> None:
    sim = run_with_failed_attempt('{"ok":false,"errorClass":"rate_limit","retryAfterSeconds":"300"}', ok_state=False)
    observation = sim.jobs[("a", 1)]
    assert isinstance(observation, JobObservation) and observation.result is not None
    assert (observation.result.error_class, observation.result.retryable) == ("permanent", False)
    assert "'retryAfterSeconds' must be a number of seconds or null, not a string" in (observation.result.message or "")

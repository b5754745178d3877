"""Names of a loop instance's objects: Jobs, Approvals and labels within Kubernetes' limits, unique per instance."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from towline.api.common import IDENTIFIER_PATTERN
from towline.api.loops import INSTANCE_ID_PATTERN, LOOP_KEY_PATTERN, instance_id, loop_of
from towline.engine import approval_name, gate_id, job_name
from towline.k8s.labels import identifier_label

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
run_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,60}[a-z0-9])?", fullmatch=True)
step_ids = st.from_regex(IDENTIFIER_PATTERN, fullmatch=True)
keys = st.one_of(st.integers(min_value=0, max_value=999), st.from_regex(LOOP_KEY_PATTERN, fullmatch=True))


@given(run_names, step_ids, keys, st.integers(min_value=1, max_value=50))
def test_an_instances_job_and_approval_names_are_dns_labels(run: str, step: str, key: str | int, attempt: int) -> None:
    instance = instance_id(step, key)
    assert re.fullmatch(INSTANCE_ID_PATTERN, instance) and loop_of(instance) == step
    job = job_name(run, instance, attempt)
    assert len(job) <= 63 and DNS_LABEL.match(job) and job.endswith(f"-{attempt}")
    approval = approval_name(run, instance)
    assert len(approval) <= 63 and DNS_LABEL.match(approval)


@given(run_names, step_ids, keys, keys)
def test_two_instances_never_share_a_name(run: str, step: str, key: str | int, other: str | int) -> None:
    if str(key) != str(other):
        assert job_name(run, instance_id(step, key), 1) != job_name(run, instance_id(step, other), 1)
        assert approval_name(run, instance_id(step, key)) != approval_name(run, instance_id(step, other))


def test_an_instance_never_takes_a_plain_steps_name() -> None:
    assert job_name("r", "deploy[1]", 1) != job_name("r", "deploy_1", 1)
    assert job_name("r", "deploy[1]", 1) != job_name("r-deploy", "x1", 1)


@given(step_ids, keys)
def test_an_instances_label_is_a_label_value_that_names_the_step_and_key(step: str, key: str | int) -> None:
    label = identifier_label(instance_id(step, key))
    assert len(label) <= 63 and LABEL_VALUE.match(label)


def test_an_instances_label_reads_as_step_dot_key() -> None:
    assert identifier_label("deploy_all[eu_west-1]") == "deploy-all.eu-west-1"


def test_an_instances_policy_gate_is_the_same_instance_of_the_loops_gate() -> None:
    assert gate_id("push[eu-1]") == "push__approval[eu-1]"
    assert loop_of(gate_id("push[3]")) == gate_id("push")

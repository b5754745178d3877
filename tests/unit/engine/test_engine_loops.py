"""forEach: one step run once per item, each instance a step of its own, paced, ended and compacted."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

from engine_harness import CloseApproval, Sim, action, workflow

from towline.api.loops import MAX_LOOP_ITEMS
from towline.api.run import StepStatus
from towline.engine import DeleteJob
from towline.engine.loops import compact
from towline_step.protocol import ErrorClass


def loop_run(for_each: dict[str, Any], *, after: bool = True, policy: dict[str, Any] | None = None,
             **extra: Any) -> Sim:
    """inventory -> deploy (forEach) -> report; inventory's output holds the clusters."""
    deploy = action("deploy", "inventory", forEach=for_each,
                    **{"with": {"url": "https://deploy.example.com/${{ item }}?n=${{ index }}"}}, **extra)
    steps = [action("inventory"), deploy, *([action("report", "deploy")] if after else [])]
    return Sim(workflow(steps, policy=policy or {}))


def started_loop(clusters: list[Any], **for_each: Any) -> Sim:
    sim = loop_run({"items": "steps.inventory.output.clusters", **for_each})
    sim.reconcile()
    sim.finish("inventory", output={"clusters": clusters})
    sim.reconcile()
    return sim


def running_instances(sim: Sim) -> list[str]:
    return [job.step_id for job in sim.jobs.values() if job.state == "active" and "[" in job.step_id]


def test_instances_start_in_item_order_with_their_item_and_index() -> None:
    sim = started_loop(["eu", "us", "ap"], maxParallel=3)
    assert sim.started() == ["inventory", "deploy[0]", "deploy[1]", "deploy[2]"]
    assert [job.inputs["url"] for job in sim.created[1:]] == [
        "https://deploy.example.com/eu?n=0", "https://deploy.example.com/us?n=1", "https://deploy.example.com/ap?n=2",
    ]
    assert len({job.job_name for job in sim.created}) == 4  # a Job of its own per instance
    assert all(len(job.job_name) <= 63 for job in sim.created)


def test_never_more_instances_run_than_max_parallel_whatever_order_they_finish_in() -> None:
    shuffle = random.Random(47)
    sim = started_loop([f"c{n}" for n in range(20)], maxParallel=3)
    seen_most = 0
    while running := running_instances(sim):
        seen_most = max(seen_most, len(running))
        assert len(running) <= 3
        sim.finish(shuffle.choice(running), output={"done": True})
        sim.reconcile()
    assert seen_most == 3
    assert sim.phase_of("deploy") == "Succeeded"
    assert sim.started()[1:21] == [f"deploy[{n}]" for n in range(20)]


def test_the_output_is_the_instances_outputs_in_item_order_not_finishing_order() -> None:
    sim = started_loop(["a", "b", "c"], maxParallel=3)
    for index in (2, 0, 1):
        sim.finish(f"deploy[{index}]", output={"cluster": "abc"[index]})
        sim.reconcile()
    assert sim.step("deploy").output == [{"cluster": "a"}, {"cluster": "b"}, {"cluster": "c"}]
    assert sim.started()[-1] == "report"  # downstream waited for every instance


def test_downstream_waits_for_every_instance() -> None:
    sim = started_loop(["a", "b"], maxParallel=2)
    sim.finish("deploy[0]")
    sim.reconcile()
    assert "report" not in sim.started()
    assert sim.phase_of("deploy") == "Running"


def test_fail_fast_fails_the_step_at_the_first_failure_and_cancels_the_rest() -> None:
    sim = started_loop(["a", "b", "c", "d", "e"], maxParallel=2, failFast=True)
    sim.fail("deploy[1]", message="cluster b refused the release")
    sim.reconcile()
    assert sim.started() == ["inventory", "deploy[0]", "deploy[1]"]  # c, d, e never start
    assert DeleteJob(sim.step("deploy[0]").job_name or "") in sim.actions  # the running one is stopped
    assert [sim.phase_of(f"deploy[{n}]") for n in range(5)] == ["Cancelled", "Failed", *["Cancelled"] * 3]
    assert sim.step("deploy[2]").reason == "FailFast"
    loop = sim.step("deploy")
    assert (loop.phase, loop.reason) == ("Failed", "InstanceFailed")
    assert loop.message == ("instance deploy[1] failed: cluster b refused the release; "
                            "4 cancelled (failFast)")
    assert (sim.phase, sim.phase_of("report")) == ("Failed", "Skipped")
    assert sim.status.message is not None and "step deploy failed" in sim.status.message


def test_without_fail_fast_every_instance_runs_and_the_step_fails_afterwards() -> None:
    sim = started_loop(["a", "b", "c"], maxParallel=1)
    sim.fail("deploy[0]")
    sim.reconcile()
    assert sim.phase_of("deploy") == "Running"
    for index in (1, 2):
        sim.finish(f"deploy[{index}]", output=index)
        sim.reconcile()
    loop = sim.step("deploy")
    assert (loop.phase, loop.error_class) == ("Failed", "permanent")
    assert loop.output == [None, 1, 2]
    assert sim.phase == "Failed"


def test_each_instance_retries_on_its_own_attempts_and_a_retry_keeps_its_slot() -> None:
    sim = loop_run({"items": ["a", "b", "c"], "maxParallel": 2},
                   retry={"limit": 2, "backoff": "fixed", "baseDelaySeconds": 30, "retryOn": ["transient"]})
    sim.reconcile()
    sim.finish("inventory")
    sim.reconcile()
    sim.fail("deploy[0]", error_class="transient")
    sim.reconcile()
    assert sim.phase_of("deploy[0]") == "Retrying"
    assert "deploy[2]" not in sim.started()  # the retrying instance still counts against maxParallel
    sim.advance(30)
    sim.reconcile()
    assert sim.step("deploy[0]").attempt == 2
    assert sim.step("deploy[1]").attempt == 1
    second = [job.job_name for job in sim.created if job.step_id == "deploy[0]"]
    assert len(second) == 2 and second[0] != second[1]


def test_when_reads_item_and_index_and_a_skipped_instance_gives_null() -> None:
    sim = loop_run({"items": [{"name": "eu", "on": True}, {"name": "us", "on": False}], "maxParallel": 2},
                   when="item.on && index >= 0")
    sim.reconcile()
    sim.finish("inventory")
    sim.reconcile()
    assert sim.started() == ["inventory", "deploy[0]"]
    assert (sim.phase_of("deploy[1]"), sim.step("deploy[1]").reason) == ("Skipped", "ConditionFalse")
    sim.finish("deploy[0]", output="ok")
    sim.reconcile()
    assert sim.step("deploy").output == ["ok", None]
    assert sim.phase_of("deploy") == "Succeeded"


def test_every_instance_skipped_ends_the_step_with_nulls_and_its_dependants_run() -> None:
    sim = loop_run({"items": [1, 2]}, when="item > 5")
    sim.reconcile()
    sim.finish("inventory")
    sim.reconcile()
    loop = sim.step("deploy")
    assert (loop.phase, loop.reason, loop.output) == ("Succeeded", "AllInstancesSkipped", [None, None])
    assert sim.started()[-1] == "report"


def test_an_empty_list_succeeds_at_once_with_an_empty_output() -> None:
    sim = started_loop([])
    assert (sim.phase_of("deploy"), sim.step("deploy").output) == ("Succeeded", [])
    assert sim.started() == ["inventory", "report"]


def test_a_key_gives_each_instance_a_stable_id() -> None:
    sim = started_loop([{"name": "eu-west-1"}, {"name": "us-east-2"}], key="item.name", maxParallel=2)
    assert sim.started()[1:] == ["deploy[eu-west-1]", "deploy[us-east-2]"]
    assert sim.step("deploy").loop is not None and sim.step("deploy").loop.keys == ["eu-west-1", "us-east-2"]


def test_duplicate_keys_fail_the_step_naming_the_field_and_the_items() -> None:
    sim = started_loop([{"name": "eu"}, {"name": "eu"}], key="item.name")
    step = sim.step("deploy")
    assert (step.phase, step.error_class) == ("Failed", "validation")
    assert step.message == ("spec.steps[1].forEach.key: items 0 and 1 both give the key 'eu'; keys must be unique: "
                            "key on a field that tells items apart")


def test_a_key_that_is_not_a_name_fails_the_step() -> None:
    sim = started_loop([{"name": "eu west"}], key="item.name")
    assert sim.step("deploy").message is not None
    assert sim.step("deploy").message.startswith("spec.steps[1].forEach.key: item 0 gives 'eu west'; a key is 1 to 40")


def test_more_items_than_the_limit_fail_the_step_naming_the_field() -> None:
    sim = started_loop(list(range(MAX_LOOP_ITEMS + 1)))
    step = sim.step("deploy")
    assert step.phase == "Failed"
    assert step.message == (f"spec.steps[1].forEach.items: yields {MAX_LOOP_ITEMS + 1} items; the limit is "
                            f"{MAX_LOOP_ITEMS}. Split the list across runs, or loop over batches of items")
    assert sim.started() == ["inventory"]


def test_items_that_are_not_a_list_fail_the_step_naming_the_field() -> None:
    sim = started_loop({"a": 1})  # type: ignore[arg-type]
    assert sim.step("deploy").message == ("spec.steps[1].forEach.items: 'steps.inventory.output.clusters' yields "
                                          "dict, not a list; make it yield the list to loop over")


def test_a_hostile_items_expression_is_refused_by_its_cost_before_it_runs() -> None:
    hostile = "steps.inventory.output.clusters.map(a, steps.inventory.output.clusters.map(b, " \
              "steps.inventory.output.clusters.map(c, a)))"
    sim = loop_run({"items": hostile})
    sim.reconcile()
    sim.finish("inventory", output={"clusters": list(range(1000))})
    sim.reconcile()
    step = sim.step("deploy")
    assert step.phase == "Failed" and step.message is not None
    assert step.message.startswith("spec.steps[1].forEach.items:") and "cost" in step.message


def test_a_gate_in_a_loop_is_one_approval_per_instance_each_checked_as_any_gate() -> None:
    review = {"id": "review", "needs": ["inventory"], "forEach": {"items": ["eu", "us", "ap"], "maxParallel": 3},
              "approval": {"message": "Deploy to ${{ item }}?", "approvers": {"users": ["bob"]}, "fourEyes": True}}
    sim = Sim(workflow([action("inventory"), review]))
    sim.reconcile()
    sim.finish("inventory")
    sim.reconcile()
    assert [(r.step_id, r.message, r.four_eyes, r.approvers.users) for r in sim.requested] == [
        (f"review[{n}]", f"Deploy to {c}?", True, ["bob"]) for n, c in enumerate(["eu", "us", "ap"])
    ]
    assert len({r.name for r in sim.requested}) == 3
    sim.decide_approval("review[0]", "Approved", by="bob")
    sim.decide_approval("review[1]", "Approved", by="alice")  # alice started the run: four eyes refuses it
    sim.reconcile()
    assert sim.step("review[0]").decided_by == "bob"
    assert (sim.phase_of("review[1]"), sim.step("review[1]").reason) == ("Failed", "FourEyes")
    sim.decide_approval("review[2]", "Approved", by="bob")
    sim.reconcile()
    assert (sim.phase_of("review"), sim.step("review").reason) == ("Failed", "FourEyes")
    assert sim.step("review[0]").decided_by == "bob"  # compaction keeps who approved what


def test_the_policy_gate_before_a_mutating_instance_is_that_instances_own() -> None:
    sim = Sim(workflow([{"id": "push", "action": "tasks.create", "forEach": {"items": [1, 2], "maxParallel": 2}}],
                       policy={"approval": {"requireForMutatingActions": True, "approvers": {"users": ["bob"]}}}))
    sim.reconcile()
    assert [r.step_id for r in sim.requested] == ["push__approval[0]", "push__approval[1]"]
    sim.decide_approval("push__approval[1]", "Approved")
    sim.reconcile()
    assert sim.started() == ["push[1]"]


def test_cancelling_the_run_stops_running_instances_and_starts_no_more() -> None:
    sim = started_loop(["a", "b", "c"], maxParallel=2)
    sim.set_spec(cancel=True)
    sim.reconcile()
    assert all(DeleteJob(sim.step(f"deploy[{n}]").job_name or "") in sim.actions for n in (0, 1))
    assert sim.phase == "Cancelled"
    assert sim.phase_of("deploy") == "Cancelled"
    assert "deploy[2]" not in sim.started()


def test_fail_fast_closes_an_instances_open_approval() -> None:
    review = {"id": "review", "forEach": {"items": [1, 2], "maxParallel": 2, "failFast": True},
              "approval": {"approvers": {"users": ["bob"]}}}
    sim = Sim(workflow([review]))
    sim.reconcile()
    sim.decide_approval("review[0]", "Rejected", by="bob")
    sim.reconcile()
    assert CloseApproval(sim.step("review[1]").approval_name or "", "Cancelled") in sim.actions
    assert (sim.phase_of("review"), sim.step("review").reason) == ("Failed", "Rejected")
    assert sim.status.conditions[-1].reason == "ApprovalRejected" or sim.condition("Succeeded").reason == \
        "ApprovalRejected"


def test_an_ended_instance_keeps_what_the_record_needs_and_nothing_else() -> None:
    sim = loop_run({"items": ["a"]}, credentials={"token": "deploy-api"},
                   retry={"limit": 3, "backoff": "fixed", "baseDelaySeconds": 1, "retryOn": ["transient"]})
    sim.reconcile()
    sim.finish("inventory")
    sim.reconcile()
    sim.fail("deploy[0]", error_class="transient", message="busy")
    sim.reconcile()
    sim.advance(1)
    sim.reconcile()
    sim.jobs[("deploy[0]", 2)] = replace(sim.jobs[("deploy[0]", 2)], image="registry.example/runner@sha256:ab")
    sim.fail("deploy[0]", message="no such cluster")
    sim.reconcile()
    entry = sim.step("deploy[0]")
    assert (entry.phase, entry.attempt, entry.error_class, entry.message) == (
        "Failed", 2, "permanent", "no such cluster")
    assert (entry.output, entry.idempotency_key, entry.credentials_used) == (None, None, [])
    assert [(record.attempt, record.image) for record in entry.history] == [(2, "registry.example/runner@sha256:ab")]
    assert sim.step("deploy").loop is not None and sim.step("deploy").loop.items is None


def test_compaction_keeps_an_unknown_side_effects_idempotency_key() -> None:
    entry = StepStatus(id="deploy[0]", phase="Failed", error_class=ErrorClass.UNKNOWN_SIDE_EFFECT,
                       idempotency_key="k1")
    compact(entry)
    assert entry.idempotency_key == "k1"


def test_a_thousand_instance_run_stays_far_below_the_object_size_limit() -> None:
    sim = loop_run({"items": [f"cluster-{n:04d}" for n in range(MAX_LOOP_ITEMS)], "maxParallel": 100}, after=False,
                   policy={"parallelism": 100})
    sim.reconcile()
    sim.finish("inventory")
    sim.reconcile()
    while running := running_instances(sim):
        for step_id in running:
            sim.finish(step_id, output={"revision": "r1"})
        sim.reconcile()
    assert sim.phase == "Succeeded"
    size = len(json.dumps(sim.status.to_wire()))
    assert size < 400_000, size  # the API server refuses objects past 1.5 MiB

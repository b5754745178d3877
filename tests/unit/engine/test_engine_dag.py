"""The `needs` DAG: ordering, parallel branches, parallelism, `when`, skips and bindings."""

from __future__ import annotations

from engine_harness import Sim, action, workflow

from towline.engine import CreateStepJob


def diamond() -> Sim:
    return Sim(workflow([action("a"), action("b", "a"), action("c", "a"), action("d", "b", "c")]))


def test_first_decide_starts_the_steps_without_needs() -> None:
    sim = Sim(workflow([action("a"), action("b"), action("c", "a")]))
    sim.reconcile()
    assert sim.phase == "Running"
    assert sim.started() == ["a", "b"]
    assert sim.status.started_at == sim.now


def test_step_starts_only_after_its_needs_succeed() -> None:
    sim = diamond()
    sim.reconcile()
    sim.finish("a")
    sim.reconcile()
    sim.finish("b")
    sim.reconcile()
    assert "d" not in sim.started()
    sim.finish("c")
    sim.reconcile()
    assert sim.started()[-1] == "d"


def test_parallel_branches_start_in_the_same_pass() -> None:
    sim = diamond()
    sim.reconcile()
    sim.finish("a")
    decision = sim.reconcile()
    assert {a.step_id for a in decision.actions if isinstance(a, CreateStepJob)} == {"b", "c"}


def test_parallelism_limits_running_jobs() -> None:
    sim = Sim(workflow([action(f"s{i}") for i in range(5)], policy={"parallelism": 2}))
    sim.reconcile()
    assert sim.started() == ["s0", "s1"]
    sim.finish("s0")
    sim.reconcile()
    assert sim.started() == ["s0", "s1", "s2"]
    assert sum(1 for s in sim.status.steps if s.phase == "Running") == 2


def test_waits_and_approvals_do_not_count_against_parallelism() -> None:
    spec = workflow([
        {"id": "pause", "wait": {"duration": "1h"}},
        {"id": "gate", "approval": {"message": "ok?"}},
        action("a"),
    ], policy={"parallelism": 1})
    sim = Sim(spec)
    sim.reconcile()
    assert sim.started() == ["a"]
    assert sim.phase_of("pause") == "Running" and sim.phase_of("gate") == "Running"


def test_run_succeeds_when_every_step_succeeds() -> None:
    sim = diamond()
    sim.succeed_all()
    assert sim.phase == "Succeeded"
    succeeded = sim.condition("Succeeded")
    assert (succeeded.status, succeeded.reason) == ("True", "Succeeded")
    assert sim.status.finished_at is not None and sim.status.wake_at is None
    assert sim.events("RunSucceeded")


def test_run_condition_is_unknown_while_in_flight() -> None:
    sim = diamond()
    sim.reconcile()
    succeeded = sim.condition("Succeeded")
    assert (succeeded.status, succeeded.reason) == ("Unknown", "Running")


def test_current_step_lists_what_is_running() -> None:
    sim = diamond()
    sim.reconcile()
    sim.finish("a")
    sim.reconcile()
    assert sim.status.current_step == "b,c"


def test_current_step_fits_its_field_for_many_steps() -> None:
    sim = Sim(workflow([action(f"a_rather_long_step_name_{i}") for i in range(30)], policy={"parallelism": 30}))
    sim.reconcile()
    assert sim.status.current_step is not None
    assert len(sim.status.current_step) <= 256 and sim.status.current_step.endswith("more")


def test_decide_never_mutates_the_status_it_is_given() -> None:
    sim = diamond()
    sim.reconcile()
    before = sim.status.model_dump()
    sim.finish("a")
    sim.reconcile(persist=False)
    assert sim.status.model_dump() == before


def test_false_when_skips_the_step() -> None:
    sim = Sim(workflow([action("a", when="params.enabled")], params=[{"name": "enabled", "type": "boolean"}]),
              params={"enabled": False})
    sim.reconcile()
    assert (sim.phase_of("a"), sim.step("a").reason) == ("Skipped", "ConditionFalse")
    assert sim.phase == "Succeeded"


def test_when_reads_outputs_of_finished_steps() -> None:
    sim = Sim(workflow([action("load"), action("act", "load", when="size(steps.load.output.items) > 0")]))
    sim.reconcile()
    sim.finish("load", output={"items": [1]})
    sim.reconcile()
    assert sim.phase_of("act") == "Running"


def test_skipped_step_skips_its_dependants() -> None:
    sim = Sim(workflow([action("a", when="false"), action("b", "a"), action("c", "b")]))
    sim.reconcile()
    assert [sim.step(s).reason for s in "abc"] == ["ConditionFalse", "NeedSkipped", "NeedSkipped"]
    assert sim.created == [] and sim.phase == "Succeeded"


def test_run_if_skipped_dependant_runs_after_a_skipped_need() -> None:
    sim = Sim(workflow([action("a", when="false"), action("b", "a", runIfSkipped=True)]))
    sim.reconcile()
    assert sim.phase_of("b") == "Running"


def test_failed_step_skips_its_dependants_and_fails_the_run() -> None:
    sim = Sim(workflow([action("a"), action("b", "a"), action("other")]))
    sim.reconcile()
    sim.fail("a")
    sim.finish("other")
    sim.reconcile()
    assert (sim.phase_of("b"), sim.step("b").reason) == ("Skipped", "NeedFailed")
    assert sim.phase == "Failed"
    assert sim.condition("Succeeded").reason == "StepFailed"


def test_independent_branch_keeps_running_after_a_failure() -> None:
    sim = Sim(workflow([action("a"), action("b"), action("c", "b")]))
    sim.reconcile()
    sim.fail("a")
    sim.finish("b")
    sim.reconcile()
    assert sim.phase_of("c") == "Running"


def test_run_if_skipped_does_not_run_after_a_failed_need() -> None:
    sim = Sim(workflow([action("a"), action("b", "a"), action("c", "b", runIfSkipped=True)]))
    sim.reconcile()
    sim.fail("a")
    sim.reconcile()
    assert (sim.phase_of("c"), sim.step("c").reason) == ("Skipped", "NeedFailed")


def test_step_that_fails_after_its_dependants_were_skipped() -> None:
    # d needs a and b; b fails, so d is skipped at once while a still runs. Then a fails too.
    sim = Sim(workflow([action("a"), action("b"), action("d", "a", "b"), action("e", "d", runIfSkipped=True)]))
    sim.reconcile()
    sim.fail("b")
    sim.reconcile()
    assert sim.phase_of("d") == "Skipped" and sim.phase_of("a") == "Running"
    sim.fail("a")
    sim.reconcile()
    assert [sim.step(s).reason for s in "de"] == ["NeedFailed", "NeedFailed"]
    assert sim.phase == "Failed" and sim.started() == ["a", "b"]


def test_skip_for_a_skipped_need_waits_until_every_need_has_finished() -> None:
    # Whether d is skipped because of b (NeedSkipped) or a (NeedFailed) must not depend on timing.
    sim = Sim(workflow([action("a"), action("b", when="false"), action("d", "a", "b")]))
    sim.reconcile()
    assert sim.phase_of("d") == "Pending"
    sim.fail("a")
    sim.reconcile()
    assert (sim.phase_of("d"), sim.step("d").reason) == ("Skipped", "NeedFailed")


def test_when_that_cannot_be_evaluated_fails_the_step_as_validation() -> None:
    sim = Sim(workflow([action("a", when="params.missing > 1")]))
    sim.reconcile()
    step = sim.step("a")
    assert (step.phase, step.error_class, step.reason) == ("Failed", "validation", "InvalidExpression")
    assert step.message is not None and "missing" in step.message
    assert sim.phase == "Failed"


def test_when_that_is_not_boolean_fails_the_step() -> None:
    sim = Sim(workflow([action("a", when="1 + 1")]))
    sim.reconcile()
    assert sim.step("a").error_class == "validation"
    assert "true or false" in (sim.step("a").message or "")


def test_bindings_render_inputs_from_params_outputs_trigger_and_run() -> None:
    spec = workflow(
        [action("load"), action("send", "load", **{"with": {
            "url": "https://crm.test/${{ params.region }}/${{ run.name }}",
            "json": "${{ steps.load.output.accounts }}",
            "source": "${{ trigger.type }}",
        }})],
        params=[{"name": "region", "default": "eu"}],
    )
    sim = Sim(spec)
    sim.reconcile()
    sim.finish("load", output={"accounts": [{"id": 1}]})
    sim.reconcile()
    assert sim.created[-1].inputs == {
        "url": f"https://crm.test/eu/{sim.name}", "json": [{"id": 1}], "source": "manual",
    }


def test_binding_reading_an_unfinished_step_fails_with_advice() -> None:
    sim = Sim(workflow([action("a"), action("b", **{"with": {"x": "${{ steps.a.output }}"}})]))
    sim.reconcile()
    message = sim.step("b").message or ""
    assert sim.step("b").error_class == "validation"
    assert "add a to this step's needs" in message


def test_binding_that_fails_at_run_time_fails_the_step_not_the_engine() -> None:
    sim = Sim(workflow([action("a"), action("b", "a", **{"with": {"n": "${{ steps.a.output.count / 0 }}"}})]))
    sim.reconcile()
    sim.finish("a", output={"count": 3})
    sim.reconcile()
    assert sim.step("b").error_class == "validation"
    assert sim.phase == "Failed"


def test_step_credentials_and_egress_reach_the_job_as_references() -> None:
    sim = Sim(workflow([action(
        "a", credentials={"crm": "crm-api"}, egress=[{"cidr": "203.0.113.0/24", "ports": [443]}],
        allowPrivateNetworks=["10.1.0.0/16"], timeoutSeconds=30,
    )]))
    sim.reconcile()
    job = sim.created[0]
    assert job.credentials == {"crm": "crm-api"}
    assert job.egress == ({"cidr": "203.0.113.0/24", "ports": [443]},)
    assert job.allow_private_networks == ("10.1.0.0/16",)
    assert job.timeout_seconds == 30
    assert sim.step("a").credentials_used == ["crm-api"]


def test_a_step_with_credentials_may_reach_only_the_literal_host_of_its_url() -> None:
    sim = Sim(workflow([action("a", credentials={"crm": "crm-api"},
                               **{"with": {"url": "https://crm.example.com/a/${{ run.name }}"}})]))
    sim.reconcile()
    assert sim.created[0].allow_hosts == ("crm.example.com",)


def test_allow_hosts_reach_the_job_whether_or_not_the_step_has_credentials() -> None:
    sim = Sim(workflow([action("a", allowHosts=["api.example.com"], **{"with": {"url": "https://x.example.com/"}})]))
    sim.reconcile()
    assert sim.created[0].allow_hosts == ("api.example.com",)


def test_a_step_without_credentials_or_allow_hosts_is_not_pinned() -> None:
    sim = Sim(workflow([action("a", **{"with": {"url": "https://${{ run.name }}.example.com/"}})]))
    sim.reconcile()
    assert sim.created[0].allow_hosts == ()


def test_a_step_with_credentials_and_a_templated_host_fails_before_its_job_exists() -> None:
    sim = Sim(workflow([action("a", credentials={"crm": "crm-api"},
                               **{"with": {"url": "https://${{ params.host }}/"}})], params=[{"name": "host"}]),
              params={"host": "evil.test"})
    sim.reconcile()
    step = sim.step("a")
    assert sim.created == [] and step.phase == "Failed" and step.error_class == "validation"
    assert step.message is not None and step.message.startswith("allowHosts: this step mounts credentials (crm)")


def test_terminal_run_is_left_as_it_is() -> None:
    sim = Sim(workflow([action("a")]))
    sim.succeed_all()
    decision = sim.reconcile()
    assert decision.actions == () and decision.status.phase == "Succeeded"


def test_steps_are_listed_in_status_once_they_leave_pending() -> None:
    sim = diamond()
    sim.reconcile()
    assert [s.id for s in sim.status.steps] == ["a"]

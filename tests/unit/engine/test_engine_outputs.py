"""A Workflow's spec.outputs: evaluated once when the run succeeds, all of them or none, bounded."""

from __future__ import annotations

from typing import Any

from engine_harness import Sim, action, workflow

from towline.engine.outputs import MAX_OUTPUTS_BYTES


def two_steps(outputs: dict[str, str], **extra: Any) -> Sim:
    return Sim(workflow([action("build"), action("deploy", "build")], outputs=outputs, **extra))


def run_to_the_end(sim: Sim, build: Any, deploy: Any) -> None:
    sim.reconcile()
    sim.finish("build", output=build)
    sim.reconcile()
    sim.finish("deploy", output=deploy)
    sim.reconcile()


def test_a_succeeded_run_records_its_outputs_from_steps_and_params() -> None:
    sim = two_steps(
        {"version": "steps.build.output.version", "url": "steps.deploy.output.url + '?env=' + params.env",
         "deployed": "steps.deploy.phase == 'Succeeded'"},
        params=[{"name": "env", "type": "string", "default": "prod"}],
    )
    run_to_the_end(sim, {"version": "1.4.2"}, {"url": "https://app.example.com"})
    assert sim.phase == "Succeeded"
    assert sim.status.outputs == {
        "version": "1.4.2", "url": "https://app.example.com?env=prod", "deployed": True,
    }


def test_outputs_stay_unset_while_the_run_is_running() -> None:
    sim = two_steps({"version": "steps.build.output.version"})
    sim.reconcile()
    sim.finish("build", output={"version": "1"})
    sim.reconcile()
    assert sim.phase == "Running"
    assert sim.status.outputs is None


def test_a_failed_run_records_no_outputs() -> None:
    sim = two_steps({"version": "steps.build.output.version"})
    sim.reconcile()
    sim.finish("build", output={"version": "1"})
    sim.reconcile()
    sim.fail("deploy")
    sim.reconcile()
    assert sim.phase == "Failed"
    assert sim.status.outputs is None


def test_an_output_that_fails_to_evaluate_fails_the_run_naming_the_output() -> None:
    sim = two_steps({"version": "steps.build.output.version", "url": "steps.deploy.output.url"})
    run_to_the_end(sim, {"version": "1"}, {"no_url_here": True})
    assert sim.phase == "Failed"
    assert sim.status.outputs is None  # never half of them
    condition = sim.condition("Succeeded")
    assert (condition.status, condition.reason) == ("False", "OutputsFailed")
    assert sim.status.message is not None and sim.status.message.startswith(
        "spec.outputs.url could not be evaluated:")
    assert "url" in sim.status.message


def test_outputs_over_the_size_limit_fail_the_run_with_the_limit_and_the_fix() -> None:
    sim = two_steps({"blob": "steps.build.output.text + steps.build.output.text"})
    run_to_the_end(sim, {"text": "x" * 3000}, {})
    assert sim.phase == "Failed"
    assert sim.status.outputs is None
    assert sim.status.message is not None
    assert f"the limit is {MAX_OUTPUTS_BYTES} bytes" in sim.status.message
    assert "Return only the values a caller needs" in sim.status.message


def test_a_hostile_output_expression_is_refused_by_its_cost_before_it_runs() -> None:
    hostile = "steps.build.output.items.map(a, steps.build.output.items.map(b, steps.build.output.items.map(c, a)))"
    sim = two_steps({"cube": hostile})
    run_to_the_end(sim, {"items": list(range(1000))}, {})
    assert sim.phase == "Failed"
    assert sim.status.outputs is None
    assert sim.status.message is not None and "too expensive to evaluate" in sim.status.message


def test_outputs_are_evaluated_once_and_kept_by_every_later_pass() -> None:
    sim = two_steps({"version": "steps.build.output.version"})
    run_to_the_end(sim, {"version": "2"}, {})
    sim.reconcile()
    assert (sim.phase, sim.status.outputs) == ("Succeeded", {"version": "2"})

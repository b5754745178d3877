"""reconcile_run through its RunDeps, against the in-memory API server: what it writes, creates and asks."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import wasmtime
from handler_fakes import (
    NAMESPACE,
    RUNS,
    TWO_STEPS,
    WORKFLOW_KIND,
    MemoryContext,
    finish_job,
    jobs,
    run,
    setup,
    status_of,
    version_of,
    workflow,
)

from towline.handlers.runs import reconcile_run
from towline.validation.codesteps import CodeStepPolicy

KEY = (NAMESPACE, "r1")


def reconcile(context: MemoryContext, name: str = "r1") -> None:
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, name))


def test_a_new_run_snapshots_its_workflow_and_starts_the_first_step(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel", params={"version": "2.0.0"}))
    reconcile(context)
    status = status_of(context, "r1")
    assert [step["id"] for step in status["workflowSpec"]["steps"]] == ["plan", "release"]
    assert status["workflowSpec"]["generation"] == 1
    assert status["params"] == {"version": "2.0.0"}
    assert status["phase"] == "Running"
    assert [(s["id"], s["phase"], s["jobName"]) for s in status["steps"]] == [
        ("plan", "Running", "towline-step-r1-plan-1")]
    assert jobs(context) == ["towline-step-r1-plan-1"], "one Job: release waits for plan"
    assert context.written[KEY]["metadata"]["resourceVersion"] == version_of(context, "r1"), "told what it wrote"
    assert context.conflicted_runs == []


def test_the_snapshot_does_not_follow_later_edits_of_the_workflow(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    reconcile(context)
    asyncio.run(context.api.merge_patch(f"/apis/towline.dev/v1alpha1/namespaces/{NAMESPACE}/workflows/rel",
                                        {"spec": {"steps": TWO_STEPS["steps"][:1]}}))
    edited = context.api.stored(WORKFLOW_KIND, NAMESPACE, "rel")
    assert edited is not None and edited["metadata"]["generation"] == 2
    reconcile(context)
    assert [step["id"] for step in status_of(context, "r1")["workflowSpec"]["steps"]] == ["plan", "release"]


def test_a_run_of_a_missing_workflow_is_refused_naming_it(context: MemoryContext) -> None:
    setup(context, run("r1", "nowhere"))
    reconcile(context)
    status = status_of(context, "r1")
    assert status["phase"] == "Failed"
    assert "Workflow 'nowhere' does not exist in namespace team" in status["message"]
    assert jobs(context) == []
    assert [finished["status"]["phase"] for finished in context.finished] == ["Failed"]


def test_a_run_of_an_invalid_workflow_is_refused_naming_it_and_the_field(context: MemoryContext) -> None:
    broken = {"steps": [{"id": "a", "action": "data.transform", "needs": ["ghost"], "with": {"data": {}}}]}
    setup(context, workflow("broken", broken), run("r1", "broken"))
    reconcile(context)
    status = status_of(context, "r1")
    assert status["phase"] == "Failed"
    assert "Workflow 'broken' is not valid (spec.steps[0].needs" in status["message"]
    assert "workflowSpec" not in status
    assert jobs(context) == []


def test_a_run_finishes_when_its_last_job_succeeds_and_is_reported_once(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel", params={"version": "2.0.0"}))
    reconcile(context)
    asyncio.run(finish_job(context.api, NAMESPACE, "towline-step-r1-plan-1", {"ok": True, "output": {"release": "v2"}}))
    reconcile(context)
    steps = status_of(context, "r1")["steps"]
    assert [(s["id"], s["phase"]) for s in steps] == [("plan", "Succeeded"), ("release", "Running")]
    assert context.finished == []
    asyncio.run(finish_job(context.api, NAMESPACE, "towline-step-r1-release-1", {"ok": True, "output": {"done": "v2"}}))
    reconcile(context)
    final = status_of(context, "r1")
    assert final["phase"] == "Succeeded"
    assert final["steps"][1]["output"] == {"done": "v2"}
    [reported] = context.finished
    assert reported["status"] == final and reported["metadata"]["name"] == "r1"

    # A finished run is not touched again: no write, no Job, no second report.
    version = version_of(context, "r1")
    writes = [r for r in context.api.requests if r[0] != "GET"]
    reconcile(context)
    assert version_of(context, "r1") == version
    assert [r for r in context.api.requests if r[0] != "GET"] == writes
    assert len(context.finished) == 1


def test_a_status_write_that_conflicts_requeues_the_run_and_writes_nothing(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    stale = context.api.stored(RUNS, NAMESPACE, "r1")
    assert stale is not None
    context.watched[KEY] = stale  # the watch's copy ...
    # ... which somebody else's write has since made stale (a user cancelling, say).
    asyncio.run(context.api.merge_patch(f"/apis/towline.dev/v1alpha1/namespaces/{NAMESPACE}/workflowruns/r1",
                                        {"metadata": {"labels": {"team": "a"}}}))
    before = context.api.stored(RUNS, NAMESPACE, "r1")
    reconcile(context)
    assert context.conflicted_runs == [KEY]
    assert context.api.stored(RUNS, NAMESPACE, "r1") == before, "the run is as the other writer left it"
    assert context.written == {} and context.finished == []

    # The next pass reads afresh and succeeds.
    reconcile(context)
    assert status_of(context, "r1")["phase"] == "Running" and context.conflicted_runs == [KEY]
    assert jobs(context) == ["towline-step-r1-plan-1"], "the Job the conflicting pass made is adopted, not doubled"


def test_a_retry_runs_the_finished_runs_snapshot_and_reuses_its_succeeded_outputs(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r0", "rel", params={"version": "3.1.0"}))
    reconcile(context, "r0")
    asyncio.run(finish_job(context.api, NAMESPACE, "towline-step-r0-plan-1", {"ok": True, "output": {"release": "v3"}}))
    reconcile(context, "r0")
    asyncio.run(finish_job(context.api, NAMESPACE, "towline-step-r0-release-1",
                           {"ok": False, "errorClass": "permanent", "message": "the registry said no"}))
    reconcile(context, "r0")
    first = status_of(context, "r0")
    assert first["phase"] == "Failed"

    setup(context, run("r1", "rel", retryOf={"run": "r0", "reuse": ["plan"]}))
    reconcile(context, "r1")
    retry = status_of(context, "r1")
    assert retry["workflowSpec"] == first["workflowSpec"]
    assert retry["params"] == {"version": "3.1.0"}, "a retry runs with the params of the run it retries"
    plan, release = retry["steps"]
    assert (plan["id"], plan["phase"], plan["output"]) == ("plan", "Succeeded", {"release": "v3"})
    assert (release["id"], release["phase"]) == ("release", "Running")
    assert [job for job in jobs(context) if "-r1-" in job] == ["towline-step-r1-release-1"], "plan is not run again"


def test_a_retry_of_a_run_that_does_not_exist_is_refused_naming_it(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel", retryOf={"run": "gone"}))
    reconcile(context)
    status = status_of(context, "r1")
    assert status["phase"] == "Failed"
    assert "spec.retryOf.run: run 'gone' does not exist in this namespace" in status["message"]
    assert jobs(context) == []


def test_a_retry_of_a_run_with_code_steps_is_refused_once_code_steps_are_off(context: MemoryContext) -> None:
    source = "def main(inputs):\n    return 1\n"
    code = {"steps": [{"id": "shape", "action": "code.python", "with": {"source": source}}]}
    context.code_steps = CodeStepPolicy(enabled=True)
    setup(context, workflow("shape", code), run("r0", "shape"))
    reconcile(context, "r0")
    asyncio.run(finish_job(context.api, NAMESPACE, "towline-step-r0-shape-1",
                           {"ok": False, "errorClass": "permanent", "message": "ZeroDivisionError"}))
    reconcile(context, "r0")
    assert status_of(context, "r0")["phase"] == "Failed"

    context.code_steps = CodeStepPolicy()  # the cluster admin turned code steps off since
    setup(context, run("r1", "shape", retryOf={"run": "r0"}))
    reconcile(context, "r1")
    retry = status_of(context, "r1")
    assert retry["phase"] == "Failed", retry
    assert "code.python is a code step, and code steps are off in this cluster" in retry["message"], retry
    assert "codeSteps.enabled=true" in retry["message"], retry
    assert [job for job in jobs(context) if "-r1-" in job] == [], "the old snapshot's code never runs"


WASM_FIXTURES = Path(__file__).parents[2] / "fixtures" / "wasm"


def wasm_step(step_id: str, key: str) -> dict[str, object]:
    return {"id": step_id, "action": "code.wasm", "with": {"module": {"configMap": {"name": "modules", "key": key}}}}


def test_a_run_whose_wasm_module_would_be_refused_fails_before_any_job(context: MemoryContext) -> None:
    """The operator checks a ConfigMap module as the runner would, when the run starts: a missing ConfigMap or a
    module importing what Towline does not provide fails the run with the step's field, and no Job is made."""
    context.code_steps = CodeStepPolicy(enabled=True)
    setup(context, workflow("wasm", {"steps": [wasm_step("greet", "greet"), wasm_step("nope", "import_env")]}),
          run("r0", "wasm"))
    reconcile(context, "r0")
    missing = status_of(context, "r0")
    assert missing["phase"] == "Failed", missing
    assert "spec.steps[0].with.module.configMap: ConfigMap modules does not exist in namespace" in missing["message"]
    assert "kubectl create configmap modules --from-file=greet=module.wasm" in missing["message"], missing

    modules = {name: base64.b64encode(bytes(wasmtime.wat2wasm((WASM_FIXTURES / f"{name}.wat").read_text()))).decode()
               for name in ("greet", "import_env")}
    setup(context, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "modules", "namespace": NAMESPACE},
                    "binaryData": modules},
          run("r1", "wasm"))
    reconcile(context, "r1")
    refused = status_of(context, "r1")
    assert refused["phase"] == "Failed", refused
    assert "spec.steps[1].with.module.configMap" in refused["message"], refused
    assert "imports env.nope, which Towline does not provide" in refused["message"], refused
    assert "spec.steps[0]" not in refused["message"], "the good module is not reported"
    assert jobs(context) == [], "a refused module's run never makes a Job"

    setup(context, workflow("greet", {"steps": [wasm_step("greet", "greet")]}), run("r2", "greet"))
    reconcile(context, "r2")
    assert status_of(context, "r2")["phase"] == "Running"
    assert jobs(context) == ["towline-step-r2-greet-1"]


def test_a_config_map_that_is_no_module_is_refused_without_showing_its_bytes(context: MemoryContext) -> None:
    """The run's author may not be allowed to read the ConfigMap they name: the operator reads it for them, so
    what it writes says why the module is refused and nothing of what the ConfigMap holds."""
    context.code_steps = CodeStepPolicy(enabled=True)
    secret_ish = base64.b64encode(b"password=hunter2").decode()
    setup(context, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "modules", "namespace": NAMESPACE},
                    "binaryData": {"settings": secret_ish}},
          workflow("peek", {"steps": [wasm_step("peek", "settings")]}), run("r0", "peek"))
    reconcile(context, "r0")
    refused = status_of(context, "r0")
    assert refused["phase"] == "Failed" and "not a WebAssembly module" in refused["message"], refused
    assert "pass" not in refused["message"] and "hunter2" not in refused["message"], refused

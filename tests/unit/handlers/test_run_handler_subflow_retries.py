"""A retried parent's subflow step retries the child that failed (reusing its Succeeded steps), through
reconcile_run against the in-memory API server; a run that only bears the earlier child's name, or a child naming
another run to retry, is never taken for it."""

from __future__ import annotations

import asyncio
from typing import Any

from handler_fakes import NAMESPACE, RUNS, TWO_STEPS, MemoryContext, finish_job, jobs, run, setup, status_of, workflow

from towline.handlers.runs import reconcile_run
from towline.k8s.client import WORKFLOW_RUNS

CALLER = {"steps": [{"id": "call", "workflow": {"name": "shared", "params": {"version": "2.0.0"}}}],
          "outputs": {"done": "steps.call.output.done"}}
SHARED = {**TWO_STEPS, "subflow": {"allowed": True}, "outputs": {"done": "steps.release.output.done"}}


def reconcile(context: MemoryContext, name: str) -> None:
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, name))


def finish(context: MemoryContext, job: str, document: dict[str, Any]) -> None:
    asyncio.run(finish_job(context.api, NAMESPACE, job, document))


def stored(context: MemoryContext, name: str) -> dict[str, Any]:
    body = context.api.stored(RUNS, NAMESPACE, name)
    assert body is not None, f"{name} does not exist"
    return body


def parent_whose_child_failed_at_its_second_step(context: MemoryContext) -> None:
    setup(context, workflow("shared", SHARED), workflow("rel", CALLER), run("p0", "rel", requestedBy="carol"))
    reconcile(context, "p0")
    reconcile(context, "p0-call")
    finish(context, "towline-step-p0-call-plan-1", {"ok": True, "output": {"release": "v2"}})
    reconcile(context, "p0-call")
    finish(context, "towline-step-p0-call-release-1", {"ok": False, "errorClass": "permanent", "message": "quota"})
    reconcile(context, "p0-call")
    assert status_of(context, "p0-call")["phase"] == "Failed"
    reconcile(context, "p0")
    assert status_of(context, "p0")["phase"] == "Failed"


def test_a_retried_parents_child_retries_the_failed_child_reusing_its_succeeded_step(context: MemoryContext) -> None:
    parent_whose_child_failed_at_its_second_step(context)
    setup(context, run("p1", "rel", requestedBy="bob", retryOf={"run": "p0"}))
    reconcile(context, "p1")
    recorded = status_of(context, "p1")["retriedChildren"]["call"]
    assert (recorded["run"], recorded["uid"], recorded["reuse"]) == (
        "p0-call", stored(context, "p0-call")["metadata"]["uid"], ["plan"])
    child = stored(context, "p1-call")
    assert child["spec"]["retryOf"] == {"run": "p0-call", "reuse": ["plan"]}
    assert child["spec"]["requestedBy"] == "bob"
    reconcile(context, "p1-call")
    status = status_of(context, "p1-call")
    plan = next(s for s in status["steps"] if s["id"] == "plan")
    assert (plan["phase"], plan.get("reason")) == ("Succeeded", "Reused")
    assert "carol" in status["earlierRequesters"], "four eyes in the child refuses who requested the parent retried"
    assert [job for job in jobs(context) if "-p1-call-" in job] == ["towline-step-p1-call-release-1"]
    finish(context, "towline-step-p1-call-release-1", {"ok": True, "output": {"done": "v2"}})
    reconcile(context, "p1-call")
    reconcile(context, "p1")
    assert (status_of(context, "p1")["phase"], status_of(context, "p1")["outputs"]) == ("Succeeded", {"done": "v2"})


def test_a_run_made_under_the_earlier_childs_name_is_never_retried_as_it(context: MemoryContext) -> None:
    parent_whose_child_failed_at_its_second_step(context)
    # bob deletes the child and has the subflow run under its name with params of his own (a run the operator ran
    # for him: its status is the operator's, its plan output came from his params)
    ran = status_of(context, "p0-call")
    asyncio.run(context.api.request("DELETE", WORKFLOW_RUNS.path(NAMESPACE, "p0-call")))
    squat = run("p0-call", "shared", requestedBy="bob", params={"version": "6.6.6"})
    squat["status"] = {**ran, "steps": [{"id": "plan", "phase": "Succeeded", "output": {"release": "v666"}},
                                        {"id": "release", "phase": "Failed"}]}
    setup(context, squat)
    setup(context, run("p1", "rel", requestedBy="carol", retryOf={"run": "p0"}))
    reconcile(context, "p1")
    assert "retriedChildren" not in status_of(context, "p1")
    assert "retryOf" not in stored(context, "p1-call")["spec"], "the new child starts from the start"


def test_a_child_naming_another_run_to_retry_than_its_parent_recorded_is_refused(context: MemoryContext) -> None:
    parent_whose_child_failed_at_its_second_step(context)
    # bob's own run of the subflow, failed after plan ran with his params
    own = run("bobs", "shared", requestedBy="bob", params={"version": "6.6.6"})
    own["status"] = {**status_of(context, "p0-call"),
                     "steps": [{"id": "plan", "phase": "Succeeded", "output": {"release": "v666"}},
                               {"id": "release", "phase": "Failed"}]}
    setup(context, own, run("p1", "rel", requestedBy="carol", retryOf={"run": "p0"}))
    reconcile(context, "p1")
    parent = stored(context, "p1")
    # the child under the name the parent records, made again retrying bob's run (what only the operator may
    # create: this is the operator's own check)
    trigger = stored(context, "p1-call")["spec"]["trigger"]
    asyncio.run(context.api.request("DELETE", WORKFLOW_RUNS.path(NAMESPACE, "p1-call")))
    forged = run("p1-call", "shared", requestedBy="carol", retryOf={"run": "bobs", "reuse": ["plan"]},
                 params={"version": "6.6.6"}, trigger=trigger)
    forged["metadata"]["ownerReferences"] = [{"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                                              "name": "p1", "uid": parent["metadata"]["uid"], "controller": True}]
    setup(context, forged)
    reconcile(context, "p1-call")
    status = status_of(context, "p1-call")
    assert status.get("phase") == "Failed", status
    assert "spec.retryOf: run 'bobs' (reusing plan) is not the earlier child the parent run 'p1' retries for step " \
        "'call'" in status["message"], status["message"]
    assert not [job for job in jobs(context) if "-p1-call-" in job]

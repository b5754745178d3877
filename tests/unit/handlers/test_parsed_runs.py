"""The parsed run kept between passes: the same model for the same resourceVersion, a fresh parse for any other,
and never changed by a pass (the next pass gets the very same object)."""

from __future__ import annotations

import asyncio
import copy

from handler_fakes import NAMESPACE, RUNS, TWO_STEPS, MemoryContext, finish_job, run, setup, workflow

from towline.api.run import WorkflowRun
from towline.handlers.parsed import ParsedRuns
from towline.handlers.runs import reconcile_run

KEY = (NAMESPACE, "r1")


def body(version: str | None, phase: str) -> dict[str, object]:
    meta: dict[str, object] = {"name": "r1", "namespace": NAMESPACE}
    if version is not None:
        meta["resourceVersion"] = version
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", "metadata": meta,
            "spec": {"workflowRef": {"name": "rel"}}, "status": {"phase": phase}}


def phase(parsed: WorkflowRun) -> str | None:
    return None if parsed.status is None else parsed.status.phase


def test_the_same_version_gets_the_same_model_and_another_version_is_parsed_again() -> None:
    parsed = ParsedRuns()
    first = parsed.parse(KEY, body("10", "Running"))
    assert parsed.parse(KEY, body("10", "Running")) is first
    changed = parsed.parse(KEY, body("11", "Succeeded"))
    assert changed is not first and phase(changed) == "Succeeded"
    # Versions are opaque: an older one is just another version, parsed again.
    assert phase(parsed.parse(KEY, body("10", "Running"))) == "Running"


def test_a_body_without_a_version_is_always_parsed() -> None:
    parsed = ParsedRuns()
    first = parsed.parse(KEY, body(None, "Running"))
    assert parsed.parse(KEY, body(None, "Running")) is not first


def test_the_answer_to_the_own_write_gets_the_written_model() -> None:
    parsed = ParsedRuns()
    before = parsed.parse(KEY, body("10", "Pending"))
    written = before.model_copy(update={"status": WorkflowRun.model_validate(body("12", "Running")).status})
    parsed.wrote(KEY, body("12", "Running"), written)
    assert parsed.parse(KEY, body("12", "Running")) is written
    parsed.forget(KEY)
    assert parsed.parse(KEY, body("12", "Running")) is not written


def kept(context: MemoryContext) -> WorkflowRun:
    stored = context.api.stored(RUNS, NAMESPACE, "r1")
    assert stored is not None
    model = context.parsed.parse(KEY, stored)
    assert model == WorkflowRun.model_validate(stored), "the kept model is what parsing the stored body gives"
    return model


def test_passes_never_change_the_kept_model_and_it_matches_the_stored_run(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel", params={"version": "2.0.0"}))
    reconcile = lambda: asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r1"))  # noqa: E731
    reconcile()
    outputs = {"release": "v2", "done": "v2"}
    for job, output in (("towline-step-r1-plan-1", "release"), ("towline-step-r1-release-1", "done"), (None, "")):
        model = kept(context)
        before = copy.deepcopy(model.model_dump())
        reconcile()  # nothing changed: decides on the kept model
        assert model.model_dump() == before
        if job is not None:
            asyncio.run(finish_job(context.api, NAMESPACE, job, {"ok": True, "output": {output: outputs[output]}}))
        reconcile()
        assert model.model_dump() == before, "a pass changed the model the previous pass kept"
    stored = context.api.stored(RUNS, NAMESPACE, "r1")
    assert stored is not None and stored["status"]["phase"] == "Succeeded"

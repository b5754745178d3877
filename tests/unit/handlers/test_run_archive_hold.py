"""While the archive is on, a run holds the archive's finalizer from its first pass: neither the history limit nor a
person's delete can remove it before the archive has written it (towline.archive removes the finalizer)."""

from __future__ import annotations

import asyncio

from handler_fakes import NAMESPACE, RUNS, TWO_STEPS, MemoryContext, jobs, run, setup, status_of, workflow

from towline.handlers.runs import reconcile_run
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER


def finalizers(context: MemoryContext, name: str = "r1") -> list[str]:
    stored = context.api.stored(RUNS, NAMESPACE, name)
    assert stored is not None
    return list(stored["metadata"].get("finalizers") or [])


def test_with_the_archive_on_the_first_pass_holds_the_run_before_it_starts_a_step(context: MemoryContext) -> None:
    context.archive_finalizer = RUN_ARCHIVE_FINALIZER
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r1"))
    assert finalizers(context) == [RUN_ARCHIVE_FINALIZER]
    assert status_of(context, "r1")["phase"] == "Running", "the status write names the patched resourceVersion"
    assert jobs(context) == ["towline-step-r1-plan-1"]
    assert context.conflicted_runs == []
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r1"))
    assert finalizers(context) == [RUN_ARCHIVE_FINALIZER], "added once"


def test_a_run_started_before_the_archive_was_turned_on_is_held_on_its_next_pass(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"))
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r1"))
    assert finalizers(context) == []
    context.archive_finalizer = RUN_ARCHIVE_FINALIZER
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r1"))
    assert finalizers(context) == [RUN_ARCHIVE_FINALIZER]


def test_other_finalizers_stay_and_the_archive_off_adds_none(context: MemoryContext) -> None:
    setup(context, workflow("rel", TWO_STEPS), run("r1", "rel"), run("r2", "rel"))
    stored = context.api.stored(RUNS, NAMESPACE, "r2")
    assert stored is not None
    asyncio.run(context.api.merge_patch(f"/apis/towline.dev/v1alpha1/namespaces/{NAMESPACE}/workflowruns/r2",
                                        {"metadata": {"finalizers": ["example.com/keep"]}}))
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r1"))
    assert finalizers(context, "r1") == []
    context.archive_finalizer = RUN_ARCHIVE_FINALIZER
    asyncio.run(reconcile_run(context.for_runs(), NAMESPACE, "r2"))
    assert finalizers(context, "r2") == ["example.com/keep", RUN_ARCHIVE_FINALIZER]

"""Which runs are dead letters of kind `run`: pure predicates over a run's object.

A run that ended Failed with none of its steps ever started (its Workflow missing or not valid, params it does not
declare, a step type it cannot resolve) is a letter; a subflow's child never is (its parent's step failed with it,
and retrying the parent starts a new child). The plugin's listing (towline.plugin.runletters) and the operator's
gauges (towline.metrics, through runtime.runstore) both ask here, so they never disagree on what a letter is.
"""

from __future__ import annotations

from towline.jsontypes import JSON
from towline.k8s.deliveryletters import REPLAY_OF_ANNOTATION
from towline.lenient import as_mapping

REPLAY_OF_RUN = "workflowruns/"
"""The towline.dev/replay-of value of a run letter's replay: workflowruns/<the failed run's name>."""


def step_started(step: JSON) -> bool:
    """Whether a step entry shows any start: an attempt, a Job, a child run, an approval, a start time."""
    return bool(step.get("attempt") or step.get("jobName") or step.get("startedAt") or step.get("childRun")
                or step.get("approvalName") or step.get("history"))


def failed_before_first_step(run: JSON) -> bool:
    """A Failed run none of whose steps ever started; never a subflow's child (its parent is what to retry)."""
    status, spec = as_mapping(run.get("status")), as_mapping(run.get("spec"))
    if status.get("phase") != "Failed" or as_mapping(spec.get("trigger")).get("type") == "parent":
        return False
    steps = status.get("steps")
    return not any(step_started(as_mapping(step)) for step in (steps if isinstance(steps, list) else []))


def replayed_run(run: JSON) -> str | None:
    """The failed run that `run` replays (its towline.dev/replay-of names workflowruns/NAME), or None."""
    annotations = as_mapping(as_mapping(run.get("metadata")).get("annotations"))
    of = str(annotations.get(REPLAY_OF_ANNOTATION) or "")
    return of.removeprefix(REPLAY_OF_RUN) if of.startswith(REPLAY_OF_RUN) else None

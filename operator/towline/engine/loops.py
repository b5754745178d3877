"""`forEach` in one `decide` pass: start a loop, pace its instances, end it, and compact what they keep.

A loop is one step whose instances are steps of their own (`deploy[0]`, or `deploy[<key>]`): the pass
schedules, observes, retries, gates and stops an instance exactly as any step, through the same code.
What is loop-specific is here: the items (evaluated once, through the same bounded CEL as `when`, and
recorded on the loop's entry until it ends), `maxParallel` (instances running, retrying, paused or behind
an open gate count), `failFast`, and the loop's own end: the list of its instances' outputs in item order.

An instance keeps little once it ends (`compact`), so a run's status stays small however many ran: its
phase, attempts, times, Job, error class and message, who decided its gate; its output moves into the
loop's list. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from towline.api.loops import MAX_LOOP_ITEMS, MAX_LOOP_ITEMS_BYTES, ForEach, LoopStatus, is_loop_key
from towline.api.run import StepStatus
from towline.engine.bindings import Bindings
from towline.engine.naming import gate_id
from towline.engine.phases import is_finished_step, transition_step
from towline.engine.state import BLOCKING_SKIP_REASONS, RunState
from towline.engine.steps import StepDriver, output_size
from towline.expressions import ExpressionError, condition_source, evaluate, render, template_expressions
from towline_step.protocol import ErrorClass

_GATE_REASONS = frozenset({"Rejected", "Expired", "FourEyes"})
"""An instance's failure reasons the loop passes on, so the run says an approval was refused."""


def loop_field(state: RunState, loop_id: str) -> str:
    """Where a loop is declared, e.g. `spec.steps[2].forEach`, for messages that name the field to fix."""
    snapshot = state.status.workflow_spec
    assert snapshot is not None
    for section, steps in (("steps", snapshot.steps), ("finally", snapshot.finally_),
                           ("compensations", snapshot.compensations)):
        for index, step in enumerate(steps):
            if step.id == loop_id:
                return f"spec.{section}[{index}].forEach"
    return f"{loop_id}.forEach"


def evaluate_items(for_each: ForEach, bindings: Bindings, field: str) -> LoopStatus:
    """The loop's items (and keys), checked against the limits; ExpressionError names the field and the fix."""
    items = _items(for_each.items, bindings, f"{field}.items")
    if len(items) > MAX_LOOP_ITEMS:
        raise ExpressionError(f"{field}.items: yields {len(items)} items; the limit is {MAX_LOOP_ITEMS}. "
                              "Split the list across runs, or loop over batches of items")
    size = output_size(items)
    if size > MAX_LOOP_ITEMS_BYTES:
        raise ExpressionError(f"{field}.items: the items are {size} bytes of JSON; the limit is "
                              f"{MAX_LOOP_ITEMS_BYTES}. Loop over names or ids and let each instance fetch the rest")
    keys = _keys(for_each.key, items, bindings, f"{field}.key") if for_each.key else None
    return LoopStatus(count=len(items), items=items, keys=keys)


def _items(value: Any, bindings: Bindings, field: str) -> list[Any]:
    if isinstance(value, list):
        sources = [source for _, source in template_expressions(value)]
        rendered = render(value, bindings.context_for(sources)) if sources else list(value)
        assert isinstance(rendered, list)
        return rendered
    if not isinstance(value, str):
        raise ExpressionError(f"{field}: must be a list or a CEL expression that yields one, "
                              f"not {type(value).__name__}")
    source = condition_source(value)
    try:
        result = evaluate(source, bindings.context_for([source]))
    except ExpressionError as error:
        raise ExpressionError(f"{field}: {error}") from None
    if not isinstance(result, list):
        raise ExpressionError(f"{field}: {source!r} yields {type(result).__name__}, not a list; "
                              "make it yield the list to loop over")
    return result


def _keys(key: str, items: list[Any], bindings: Bindings, field: str) -> list[str]:
    source = condition_source(key)
    base = bindings.context_for([source])
    keys: list[str] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        try:
            value = evaluate(source, {**base, "item": item, "index": index})
        except ExpressionError as error:
            raise ExpressionError(f"{field}: item {index}: {error}") from None
        text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
        if text is None or not is_loop_key(text):
            raise ExpressionError(f"{field}: item {index} gives {str(value)[:80]!r}; a key is 1 to 40 letters, "
                                  "digits, '.', '_' or '-', starting and ending with a letter or digit")
        if text in seen:
            raise ExpressionError(f"{field}: items {seen[text]} and {index} both give the key {text!r}; keys "
                                  "must be unique: key on a field that tells items apart")
        seen[text] = index
        keys.append(text)
    return keys


def expand_loops(state: RunState) -> None:
    """Every loop the status records as started gets its instances in the graph, for this pass."""
    for entry in state.status.steps:
        if entry.loop is not None and entry.id in state.graph.steps:
            state.graph.add_instances(entry.id, entry.loop.instance_ids(entry.id))


def ended_badly(entry: StepStatus | None) -> bool:
    """An instance that failed, was cancelled or was skipped because something before it failed."""
    return entry is not None and is_finished_step(entry) and (
        entry.phase in ("Failed", "Cancelled")
        or (entry.phase == "Skipped" and entry.reason in BLOCKING_SKIP_REASONS)
    )


class Loops:
    """The loops of one pass; `schedule_step` is the pass's own way to move any pending or retrying step."""

    def __init__(self, driver: StepDriver, schedule_step: Callable[[str], None]) -> None:
        self.driver = driver
        self.state = driver.state
        self.schedule_step = schedule_step

    def start(self, loop_id: str) -> None:
        """Evaluate the items once, record them, and make the instances steps of the graph."""
        step = self.state.graph.steps[loop_id]
        assert step.for_each is not None
        try:
            loop = evaluate_items(step.for_each, self.driver.bindings, loop_field(self.state, loop_id))
        except ExpressionError as error:
            self.driver.fail_before_start(loop_id, error)
            return
        entry = self.state.edit(loop_id)
        transition_step(entry, "Running", at=self.driver.now)
        entry.loop = loop
        entry.output = [None] * loop.count
        self.state.graph.add_instances(loop_id, loop.instance_ids(loop_id))
        self.driver.event("Normal", "LoopStarted", f"step {loop_id} runs {loop.count} instance(s), "
                          f"at most {step.for_each.max_parallel} at once")
        self.advance(loop_id)

    def advance(self, loop_id: str) -> None:
        """Start instances up to maxParallel (in item order), then end the loop if it is over."""
        step = self.state.graph.steps[loop_id]
        assert step.for_each is not None
        instances = self.state.graph.instances[loop_id]
        if not (step.for_each.fail_fast and any(ended_badly(self.state.get(i)) for i in instances)):
            active = sum(1 for instance in instances if self._active(instance))
            waiting_for_a_slot = False
            for instance in instances:
                if self._active(instance):
                    self.schedule_step(instance)  # a due retry, or a gate that passed
                elif (not waiting_for_a_slot and active < step.for_each.max_parallel
                      and self.state.phase(instance) == "Pending"):
                    self.schedule_step(instance)
                    started = self._active(instance)
                    active += started
                    # Left Pending, not behind its gate: no Job may start under the run's parallelism now, so
                    # neither may the next instance's.
                    waiting_for_a_slot = not started and self.state.phase(instance) == "Pending"
        self._conclude(loop_id)

    def _active(self, instance: str) -> bool:
        """Started and not over (retrying and paused included), or waiting behind its own open gate."""
        entry = self.state.get(instance)
        if entry is not None and entry.phase != "Pending":
            return not is_finished_step(entry)
        if not self.state.graph.approval_policy.require_for_mutating_actions:
            return False  # no policy gate can be open before it
        gate = self.state.get(gate_id(instance))
        return gate is not None and not is_finished_step(gate)

    def _conclude(self, loop_id: str) -> None:
        step = self.state.graph.steps[loop_id]
        assert step.for_each is not None
        instances = self.state.graph.instances[loop_id]
        self.compact(self.state.edited_ids())
        failed = [instance for instance in instances if ended_badly(self.state.get(instance))]
        stopped = 0
        if failed and step.for_each.fail_fast:
            stopped = self._stop_the_rest(instances, failed[0])
        elif not all(self._finished(instance) for instance in instances):
            return
        self.compact(self.state.edited_ids())
        self._end(loop_id, failed, stopped)

    def _finished(self, instance: str) -> bool:
        entry = self.state.get(instance)
        return entry is not None and is_finished_step(entry)

    def _stop_the_rest(self, instances: tuple[str, ...], cause: str) -> int:
        message = f"cancelled: instance {cause} failed and forEach.failFast is set"
        stopped = 0
        for instance in instances:
            if self._finished(instance):
                continue
            gate = self.state.get(gate_id(instance)) if self.state.graph.approval_policy.require_for_mutating_actions \
                else None
            if gate is not None and not is_finished_step(gate):
                self.driver.stop(gate.id, "Cancelled", "FailFast", message)
            self.driver.stop(instance, "Cancelled", "FailFast", message)
            stopped += 1
        return stopped

    def _end(self, loop_id: str, failed: list[str], stopped: int) -> None:
        entry = self.state.edit(loop_id)
        assert entry.loop is not None
        entry.loop = entry.loop.model_copy(update={"items": None})
        instances = self.state.graph.instances[loop_id]
        if failed:
            first = self.state.get(failed[0])
            assert first is not None
            rest = f"; {len(failed) - 1} other instance(s) failed" if len(failed) > 1 else ""
            rest += f"; {stopped} cancelled (failFast)" if stopped else ""
            entry.error_class = first.error_class or (ErrorClass.PERMANENT if first.phase == "Failed" else None)
            reason = first.reason if first.reason in _GATE_REASONS else "InstanceFailed"
            what = f"instance {first.id} {first.phase.lower()}: {first.message or first.reason or ''}"
            transition_step(entry, "Failed", at=self.driver.now, reason=reason, message=what + rest)
            self.driver.event("Warning", "StepFailed", f"step {loop_id}: {entry.message}")
            self.driver.after_failure(loop_id)
            return
        if instances and all(self.state.phase(instance) == "Skipped" for instance in instances):
            # A started step cannot become Skipped; its dependants run, and read a list of nulls.
            transition_step(entry, "Succeeded", at=self.driver.now, reason="AllInstancesSkipped",
                            message="every instance was skipped by its when condition")
            return
        transition_step(entry, "Succeeded", at=self.driver.now, reason="AllInstancesEnded",
                        message=f"{len(instances)} instance(s) ended")

    # --- compaction ----------------------------------------------------------------------

    def compact(self, entry_ids: Iterable[str]) -> None:
        """Instances that ended in this pass keep only what the record needs; outputs move into the loop's list.

        Only entries this pass changed: one compacted in an earlier pass is already small.
        """
        graph = self.state.graph
        for entry_id in entry_ids:
            loop_id = graph.instance_of.get(entry_id)
            entry = self.state.get(entry_id)
            if loop_id is None or entry is None or not is_finished_step(entry) or not self.state.edited(entry_id):
                continue
            if entry.output is not None:
                loop = self.state.edit(loop_id)
                outputs = list(loop.output) if isinstance(loop.output, list) else [None] * len(graph.instances[loop_id])
                outputs[graph.instance_index[entry_id]] = entry.output
                loop.output = outputs
            compact(entry)

    def compact_the_rest(self) -> None:
        """At the end of the pass: instances stopped by cancel or the run deadline, and their loops' items."""
        edited = self.state.edited_ids()
        self.compact(edited)
        for entry_id in edited:
            entry = self.state.get(entry_id)
            if entry is not None and entry.loop is not None and entry.loop.items is not None \
                    and is_finished_step(entry):
                entry.loop = entry.loop.model_copy(update={"items": None})


def compact(entry: StepStatus) -> None:
    """What an ended instance keeps: phase, attempts, times, Job, class, message, who decided, its last attempt.

    Its output is in the loop's list; its credentials are the loop's; its idempotency key stays only when a person
    must check whether it took effect.
    """
    entry.output = None
    entry.usage = None
    entry.credentials_used = []
    entry.mutating = None
    entry.retry_at = entry.wake_at = entry.expires_at = None
    if entry.error_class != ErrorClass.UNKNOWN_SIDE_EFFECT:
        entry.idempotency_key = None
    # The last attempt's record says what image ran and how it ended; its Job and times are the entry's own.
    entry.history = [
        record.model_copy(update={"message": None, "job_name": None, "started_at": None, "finished_at": None})
        if record.attempt == entry.attempt else record.model_copy(update={"message": None})
        for record in entry.history[-1:]
    ]

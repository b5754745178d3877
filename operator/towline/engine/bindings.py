"""The CEL context a step's `when` and `${{ }}` bindings are evaluated over.

`params`, `trigger`, `run` and `steps.<id>.{output, phase, errorClass}`. Only
the steps an expression names are put into `steps` (cheap on a 1,000-step
run), and a step may only read steps that have finished: reading one that is
still running would make the result depend on timing, so it is an error that
tells the author to add the step to `needs`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from functools import lru_cache
from typing import Any

from towline.api.workflow import Step
from towline.engine.phases import is_finished_step
from towline.engine.state import RunState
from towline.engine.view import RunView
from towline.expressions import (
    ExpressionError,
    condition_source,
    evaluate_condition,
    referenced_steps,
    render,
    template_expressions,
)
from towline_connectors.wire import parse_rfc3339

_DYNAMIC_STEP_ACCESS = re.compile(r"\bsteps\s*\[\s*[^'\"\s]")


@lru_cache(maxsize=8192)
def _steps_read_by(source: str) -> frozenset[str] | None:
    """Step ids an expression reads; None when it indexes `steps` with a computed key."""
    if _DYNAMIC_STEP_ACCESS.search(source):
        return None
    return frozenset(referenced_steps(source))


def step_expressions(step: Step) -> Iterator[str]:
    """Every CEL source a step evaluates: `when`, bindings in `with`, the gate message, the wait time."""
    if step.when:
        yield condition_source(step.when)
    for _, source in template_expressions(step.with_):
        yield source
    if step.approval is not None:
        for _, source in template_expressions(step.approval.message):
            yield source
    if step.wait is not None and step.wait.until:
        for _, source in template_expressions(step.wait.until):
            yield source


class Bindings:
    """Builds evaluation contexts for one pass; `run_phase` is asked lazily (finally steps see the outcome)."""

    def __init__(self, run: RunView, state: RunState, run_phase: Callable[[], str]) -> None:
        self._run = run
        self._state = state
        self._run_phase = run_phase
        self._base: dict[str, Any] | None = None

    def context_for(self, sources: Iterable[str], entry_id: str | None = None) -> dict[str, Any]:
        """The context for these sources; raises ExpressionError when one reads an unfinished step.

        For a loop instance (`entry_id`), `item` and `index` too: its item, and its place in the loop's items.
        """
        if self._base is None:
            self._base = {
                "params": self._state.status.params,
                "trigger": self._run.spec.trigger.to_wire(),
                "run": {
                    "name": self._run.name,
                    "namespace": self._run.namespace,
                    "uid": self._run.uid,
                    "workflow": self._run.workflow_name,
                },
            }
        wanted: set[str] | None = set()
        for source in sources:
            read = _steps_read_by(source)
            if read is None:
                wanted = None
                break
            assert wanted is not None
            wanted |= read
        steps: dict[str, Any] = {}
        ids = self._state.graph.steps.keys() if wanted is None else wanted
        for step_id in ids:
            entry = self._state.get(step_id)
            if entry is None or not is_finished_step(entry):
                if wanted is None or step_id not in self._state.graph.steps:
                    continue  # unknown ids fall through to CEL's own "no such key" error
                raise ExpressionError(
                    f"reads steps.{step_id}, which has not finished; add {step_id} to this step's needs"
                )
            steps[step_id] = {"output": entry.output, "phase": entry.phase, "errorClass": entry.error_class}
        run_info = dict(self._base["run"])
        run_info["phase"] = self._run_phase()
        return {**self._base, "run": run_info, "steps": steps, **self._instance_scope(entry_id)}

    def _instance_scope(self, entry_id: str | None) -> dict[str, Any]:
        loop_id = self._state.graph.instance_of.get(entry_id or "")
        if loop_id is None:
            return {}
        loop = self._state.get(loop_id)
        assert loop is not None and loop.loop is not None and loop.loop.items is not None
        index = self._state.graph.instance_index[entry_id or ""]
        return {"item": loop.loop.items[index], "index": index}

    def when(self, step: Step) -> bool:
        assert step.when is not None
        source = condition_source(step.when)
        return evaluate_condition(source, self.context_for([source], step.id))

    def inputs(self, step: Step) -> dict[str, Any]:
        sources = [source for _, source in template_expressions(step.with_)]
        if not sources:
            return dict(step.with_)
        rendered: dict[str, Any] = render(step.with_, self.context_for(sources, step.id))
        return rendered

    def text(self, template: str, entry_id: str | None = None) -> str:
        sources = [source for _, source in template_expressions(template)]
        if not sources:
            return template
        value = render(template, self.context_for(sources, entry_id))
        return value if isinstance(value, str) else str(value)

    def time(self, template: str, entry_id: str | None = None) -> datetime:
        """An RFC 3339 time, possibly from a binding; a time without an offset is ambiguous and refused."""
        text = self.text(template, entry_id).strip()
        try:
            moment = parse_rfc3339(text)
        except ValueError:
            raise ExpressionError(
                f"wait.until: {text!r} is not an RFC 3339 time such as 2026-01-31T08:00:00Z"
            ) from None
        if moment.tzinfo is None:
            raise ExpressionError(f"wait.until: {text!r} has no UTC offset; add one, e.g. {text}Z")
        return moment

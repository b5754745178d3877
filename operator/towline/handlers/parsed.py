"""The parsed run kept between passes, by resourceVersion.

Validating a run's status (with its Workflow snapshot) costs in proportion to the run's size, and most
passes see a body that is unchanged or is the answer to this process's own last write. So the model a pass
parsed (or the run it just wrote) is kept per run with the version it belongs to, and a body with that same
version gets the same model again; any other version is parsed afresh. Versions are opaque: only ever
compared for equality. Passes never mutate the model they get (the engine copies before it changes a
status), which is what makes handing the same object to the next pass safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from towline.api.run import WorkflowRun
from towline.handlers.context import Key
from towline.k8s.client import resource_version


@dataclass
class ParsedRuns:
    _runs: dict[Key, tuple[str, WorkflowRun]] = field(default_factory=dict)

    def parse(self, key: Key, body: dict[str, Any]) -> WorkflowRun:
        """`body` as a model: the kept one when its version is the kept version, else validated (and kept)."""
        version = resource_version(body)
        kept = self._runs.get(key)
        if kept is not None and version is not None and kept[0] == version:
            return kept[1]
        run = WorkflowRun.model_validate(body)
        if version is None:
            self._runs.pop(key, None)
        else:
            self._runs[key] = (version, run)
        return run

    def wrote(self, key: Key, written: dict[str, Any], run: WorkflowRun) -> None:
        """This process wrote `run` and the API server answered `written`: its echo needs no parsing."""
        version = resource_version(written)
        if version is None:
            self._runs.pop(key, None)
        else:
            self._runs[key] = (version, run)

    def forget(self, key: Key) -> None:
        self._runs.pop(key, None)

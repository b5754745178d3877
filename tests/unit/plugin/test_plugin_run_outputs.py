"""A run's outputs (status.outputs) in the display model and every view of it, and `run --wait [-o json|yaml]`."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from towline.plugin import commands, follow, render
from towline.plugin.cli import build_parser, main
from towline.plugin.completion import candidates
from towline.plugin.describe import describe
from towline.plugin.runtree import run_tree
from towline.plugin.ui import history, views

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OUTPUTS = {"version": "1.4.2", "hosts": ["a", "b"]}


def succeeded_run(outputs: Any = OUTPUTS) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Succeeded", "startedAt": "2026-12-01T11:00:00Z", "finishedAt": "2026-12-01T11:01:00Z",
        "workflowSpec": {"generation": 1, "steps": [{"id": "build", "action": "http.request"}],
                         "outputs": {"version": "steps.build.output.version"}},
        "steps": [{"id": "build", "phase": "Succeeded", "output": {"version": "1.4.2"}}],
    }
    if outputs is not None:
        status["outputs"] = outputs
    return {"metadata": {"name": "release-1", "namespace": "team", "creationTimestamp": "2026-12-01T11:00:00Z"},
            "spec": {"workflowRef": {"name": "release"}}, "status": status}


def test_the_display_model_carries_the_runs_outputs_and_none_before_it_has_them() -> None:
    assert run_tree(succeeded_run()).facts.outputs == OUTPUTS
    assert run_tree(succeeded_run(outputs=None)).facts.outputs is None
    assert run_tree(succeeded_run(outputs="not a mapping")).facts.outputs is None


def test_status_shows_each_output_as_json() -> None:
    text = render.status_tree(run_tree(succeeded_run()), NOW)
    assert 'Outputs\n  hosts: ["a", "b"]\n  version: "1.4.2"\n' in text
    assert "Outputs" not in render.status_tree(run_tree(succeeded_run(outputs=None)), NOW)


def test_describe_shows_the_outputs_under_the_params() -> None:
    text = describe(run_tree(succeeded_run()), [], [], NOW)
    assert "Params:        <none>\nOutputs:\n  hosts:\n  - a\n  - b\n  version: 1.4.2\n" in text


def test_the_run_page_live_and_archived_carries_the_outputs() -> None:
    assert views.run_detail(run_tree(succeeded_run()))["outputs"] == OUTPUTS
    assert views.run_detail(run_tree(succeeded_run(outputs=None)))["outputs"] is None
    item = {"metadata": {"name": "release-1"}, "workflow": "release", "phase": "Succeeded",
            "record": {"run": succeeded_run(), "approvals": [], "logs": []}}
    assert history.archived_detail(item)["outputs"] == OUTPUTS


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "release", "-o", "json", "--follow"], "prints the created run, or with --wait the finished one"),
    (["run", "release", "--wait", "--follow"], "--follow (print progress) or --wait (print only the end)"),
    (["run", "release", "--wait", "-o", "table"], "argument -o/--output: invalid choice: 'table'"),
])
def test_run_refuses_a_bad_wait_or_output_flag_in_one_line_naming_the_fix(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_run_completes_wait_and_the_output_formats() -> None:
    assert "--wait" in candidates(build_parser(), ["run", "release", "--w"])
    assert candidates(build_parser(), ["run", "release", "--wait", "-o", ""]) == ["json", "yaml", "name"]


@pytest.mark.parametrize(("form", "printed"), [
    (None, ['workflowrun/release-1 Succeeded', '  hosts: ["a", "b"]', '  version: "1.4.2"']),
    ("json", [json.dumps(succeeded_run(), indent=2)]),
])
def test_run_wait_prints_the_end_and_the_outputs_or_the_finished_run(
    form: str | None, printed: list[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def ended(*_: Any) -> dict[str, Any]:
        return succeeded_run()

    monkeypatch.setattr(follow, "run_until_it_ends", ended)
    out: list[str] = []
    io = commands.Io(out.append, out.append)
    code = asyncio.run(commands.wait_for_run(cast(Any, None), "team", io, "release-1", form))
    assert (code, out) == (0, printed)

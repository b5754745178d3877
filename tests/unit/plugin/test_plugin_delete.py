"""`kubectl towline delete`: which ended runs a selection picks (--keep per Workflow, --older-than from the
end), the command lines it refuses in one line naming the flag, and its completion."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from towline.plugin.cli import build_parser, main
from towline.plugin.completion import candidates
from towline.plugin.deleting import Selection

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def run(name: str, workflow: str, phase: str, ended_hours_ago: float | None, *, namespace: str = "team",
        created_hours_ago: float = 100) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if ended_hours_ago is not None:
        status["finishedAt"] = (NOW - timedelta(hours=ended_hours_ago)).isoformat().replace("+00:00", "Z")
    created = (NOW - timedelta(hours=created_hours_ago)).isoformat().replace("+00:00", "Z")
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"workflowRef": {"name": workflow}}, "status": status}


RUNS = [
    run("a1", "a", "Succeeded", 50, created_hours_ago=60),
    run("a2", "a", "Failed", 30, created_hours_ago=40),
    run("a3", "a", "Cancelled", 1, created_hours_ago=20),
    run("a4", "a", "Running", None, created_hours_ago=10),
    run("a5", "a", "AwaitingApproval", None, created_hours_ago=5),
    run("b1", "b", "Succeeded", 70, created_hours_ago=80),
    run("b1", "b", "Succeeded", 70, namespace="other", created_hours_ago=80),
    run("n1", "a", "Cancelled", None, created_hours_ago=90),  # cancelled before it started: no finishedAt
]


def names(selection: Selection) -> list[str]:
    return [f"{r['metadata']['namespace']}/{r['metadata']['name']}" for r in selection.pick(RUNS, NOW)]


def test_a_selection_picks_only_ended_runs_oldest_first() -> None:
    assert names(Selection(workflow="a")) == ["team/n1", "team/a1", "team/a2", "team/a3"]
    assert names(Selection(phases=frozenset({"Failed", "Cancelled"}))) == ["team/n1", "team/a2", "team/a3"]


def test_keep_keeps_the_newest_n_of_each_workflow_in_each_namespace() -> None:
    assert names(Selection(keep=1)) == ["team/n1", "team/a1", "team/a2"]
    assert names(Selection(keep=2, workflow="a")) == ["team/n1", "team/a1"]
    assert names(Selection(keep=0, workflow="b")) == ["other/b1", "team/b1"]


def test_older_than_counts_from_the_end_or_creation_for_a_run_that_never_started() -> None:
    assert names(Selection(older_than=timedelta(hours=40))) == ["team/n1", "other/b1", "team/b1", "team/a1"]
    assert names(Selection(older_than=timedelta(hours=40), keep=1)) == ["team/n1", "team/a1"]
    assert names(Selection(older_than=timedelta(hours=100))) == []


@pytest.mark.parametrize(("argv", "says"), [
    (["delete"], "delete needs RUN names or a selection"),
    (["delete", "r1", "--keep", "3"], "RUN names or a selection"),
    (["delete", "r1", "-A"], "RUN names or a selection"),
    (["delete", "--phase", "Failed", "--force"], "--force applies to runs named"),
    (["delete", "--phase", "Running"], "argument --phase: Running: delete selects only ended runs"),
    (["delete", "--phase", "Done"], "argument --phase: unknown phase 'Done'"),
    (["delete", "--keep", "-1"], "argument --keep: '-1' is not a whole number; use e.g. --keep 10"),
    (["delete", "--older-than", "week"], "argument --older-than: 'week' is not a duration"),
])
def test_a_bad_delete_command_line_is_one_line_naming_the_flag_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_delete_completes_its_flags_and_only_ended_phases() -> None:
    assert candidates(build_parser(), ["delete", "--phase", ""]) == ["Succeeded", "Failed", "Cancelled"]
    assert {"--older-than", "--keep", "--dry-run", "--force", "--all-namespaces"} <= \
        set(candidates(build_parser(), ["delete", "old-run", "--"]))
    assert candidates(build_parser(), ["delete", "--o"]) == ["--older-than"]

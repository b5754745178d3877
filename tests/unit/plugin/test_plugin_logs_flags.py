"""`kubectl towline logs --tail/--since/--timestamps/-c`: the log API parameters they become, their completion,
and bad values as one line naming the flag, exit 2."""

from __future__ import annotations

import pytest

from towline.plugin.cli import build_parser, main
from towline.plugin.completion import candidates
from towline.plugin.livecli import log_query


def query(*argv: str) -> dict[str, str]:
    return log_query(build_parser().parse_args(["logs", "run-1", *argv]))


def test_the_flags_become_the_log_apis_parameters() -> None:
    assert query() == {}
    assert query("--tail", "20", "--since", "1h30m", "--timestamps") == \
        {"tailLines": "20", "sinceSeconds": "5400", "timestamps": "true"}
    assert query("--tail", "0") == {"tailLines": "0"}
    assert query("-c", "prepare") == {"container": "prepare"}
    assert query("-c", "step", "-f") == {}  # the step's own container: the pod's only non-init one


@pytest.mark.parametrize(("argv", "says"), [
    (["logs", "r", "--tail", "-5"], "argument --tail: '-5' is not a whole number of lines; use e.g. --tail 20"),
    (["logs", "r", "--since", "soon"], "argument --since: 'soon' is not a duration"),
    (["logs", "r", "-c", "runner"], "argument -c/--container: invalid choice: 'runner'"),
])
def test_a_bad_logs_flag_is_one_line_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err


def test_logs_completes_its_container_choices_and_flags() -> None:
    assert candidates(build_parser(), ["logs", "r", "-c", ""]) == ["step", "prepare"]
    assert candidates(build_parser(), ["logs", "r", "--ti"]) == ["--timestamps"]

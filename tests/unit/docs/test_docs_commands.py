"""Every `kubectl towline ...` and `towline ...` command the docs show parses with the program's own parser:
its commands and flags exist and take what the docs give them (abbreviated flags refused). Commands named in
prose (`kubectl towline run`, `kubectl towline COMMAND --help`) may leave their arguments out. And the
command table of docs/operating.md has a row for every command, naming each of its options."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.consoleblocks import section_lines
from towline_dev.doccommands import (
    name_error,
    named_commands,
    parse_error,
    shown_commands,
    subcommands,
    towline_commands,
)
from towline_dev.docmarkdown import user_docs


def command_problems(documents: list[Path], root: Path | None = None) -> list[str]:
    problems = []
    for document in documents:
        for shown in shown_commands(document):
            if error := parse_error(shlex.split(shown.text)):
                problems.append(f"{shown.where(root) if root else shown.where()}: {shown.text}: {error}")
        for named in named_commands(document):
            if error := name_error(shlex.split(named.text)):
                problems.append(f"{named.where(root) if root else named.where()}: {named.text}: {error}")
    return problems


def test_every_command_the_docs_show_parses() -> None:
    assert command_problems(user_docs()) == []


def test_the_docs_show_the_plugins_and_the_towline_commands() -> None:
    # A reader that found nothing would pass the test above whatever the docs say.
    shown = [found.text.split()[:3] for document in user_docs() for found in shown_commands(document)]
    assert ["kubectl", "towline", "run"] in shown
    assert ["towline", "webhook", "send"] in shown


def test_a_command_line_is_cut_into_the_commands_it_runs() -> None:
    line = ("RUN=$(kubectl towline -n x run y -o name) && kubectl towline status $RUN | head\n"
            "source <(kubectl towline completion bash)  # --not-a-flag")
    assert list(towline_commands(line)) == [
        ["kubectl", "towline", "-n", "x", "run", "y", "-o", "name"], ["kubectl", "towline", "status", "$RUN"],
        ["kubectl", "towline", "completion", "bash"]]


def test_a_wrong_flag_command_or_value_fails_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "Run `kubectl towline run` or `kubectl towline logs --tial 5`; `towline world uplink 1` is a name.\n\n"
        "```console\n$ kubectl towline -n team run release --follow\n"
        "$ kubectl towline runs --foll\n"
        "$ kubectl towline graph RUN --kind steps \\\n    -o dot | dot -Tsvg\n"
        "$ towline webhook send URL --secret-file s --scheme sha1\n"
        "$ kubectl towline pipelines\n```\n")
    problems = command_problems([tmp_path / "a.md"], tmp_path)
    assert [problem.split(": ", 1)[0] for problem in problems] == ["a.md:5", "a.md:6", "a.md:8", "a.md:9", "a.md:1"]
    assert "unrecognized arguments: --foll" in problems[0]
    assert "argument --kind: invalid choice: 'steps'" in problems[1]
    assert "argument --scheme: invalid choice: 'sha1'" in problems[2]
    assert "invalid choice: 'pipelines'" in problems[3]
    assert "--tial" in problems[4]


def table_gaps(operating: Path) -> list[str]:
    """The plugin's commands that docs/operating.md's command table has no row for, and the options a
    command's rows never name (an option counts as named by any of its spellings, `-f` or `--follow`)."""
    from towline.plugin.cli import build_parser  # noqa: PLC0415 - as the plugin builds it

    _, section = section_lines(operating.read_text(), "`kubectl towline`")
    rows = [line for line in section if line.startswith("| `")]
    gaps = []
    for name, parser in subcommands(build_parser()).items():
        # The first cell names the command: `logs RUN ...`, or `cancel` / `suspend` / `resume RUN`.
        mine = " ".join(row for row in rows if re.search(rf"`{re.escape(name)}[ `]", row.split(" | ")[0]))
        if not mine:
            gaps.append(f"{name}: no row")
            continue
        for action in parser._actions:
            spellings = [option for option in action.option_strings if option not in ("-h", "--help")]
            named = any(re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", mine) for option in spellings)
            if spellings and not named:
                gaps.append(f"{name}: {'/'.join(spellings)} is in no row of it")
    return gaps


def test_the_plugins_command_table_has_every_command_and_option() -> None:
    assert table_gaps(REPO_ROOT / "docs" / "operating.md") == [], "docs/operating.md, `kubectl towline`"

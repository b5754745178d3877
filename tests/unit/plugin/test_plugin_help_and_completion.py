"""Every `kubectl towline` command documents itself with examples, refuses bad flags in one line, and
completes in bash, zsh and fish (argcomplete) and through kubectl's plugin completion (`kubectl_complete-towline`)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from towline.plugin.cli import build_parser, main
from towline.plugin.completion import candidates, kubectl_answer

BIN = Path(sys.executable).parent


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_has_help_with_an_examples_section() -> None:
    commands = subcommands()
    assert {"run", "runs", "status", "describe", "version", "completion", "approve", "logs"} <= set(commands)
    for name, parser in commands.items():
        text = parser.format_help()
        assert parser.description, name
        examples = text.split("Examples:\n", 1)
        assert len(examples) == 2, f"`kubectl towline {name} --help` has no Examples section"
        assert f"kubectl towline {name}" in examples[1], f"{name}'s examples do not show the command"
    assert "Examples:" in build_parser().format_help()


@pytest.mark.parametrize(("argv", "flag", "fix"), [
    (["runs", "--phase", "Running,Sleeping"], "--phase", "Pending, Running, Waiting, AwaitingApproval"),
    (["runs", "--since", "yesterday"], "--since", "e.g. 10m, 2h, 1d"),
    (["runs", "--since", "0m"], "--since", "positive duration"),
    (["runs", "--last", "-3"], "--last", "--last 5"),
    (["runs", "-o", "table"], "-o/--output", "choose from"),
    (["describe", "r", "-o", "wide"], "-o/--output", "choose from"),
])
def test_a_bad_flag_value_is_one_line_naming_the_flag_and_the_fix_exit_2(
    argv: list[str], flag: str, fix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"argument {flag}" in err and fix in err and "Traceback" not in err


def test_completion_scripts_name_the_executable(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in ("bash", "zsh", "fish"):
        assert main(["completion", shell]) == 0
        assert "kubectl-towline" in capsys.readouterr().out


def test_the_bash_script_loads_and_completes_subcommands_and_flags() -> None:
    """A real bash sources the printed script, then runs the registered completion function the way bash
    does on TAB (COMP_WORDS, COMP_LINE, COMP_POINT), which runs kubectl-towline by argcomplete's protocol."""
    script = r"""
set -e
source <(kubectl-towline completion bash)
complete -p kubectl-towline
complete_line() {
  COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; read -r -a COMP_WORDS <<< "$COMP_LINE"
  [[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=()
  _python_argcomplete kubectl-towline "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
  echo "$1 => ${COMPREPLY[*]}"
}
complete_line "kubectl-towline de"
complete_line "kubectl-towline runs --ph"
complete_line "kubectl-towline runs -o "
complete_line "kubectl-towline completion "
"""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("complete -") and lines[0].endswith(" kubectl-towline")
    answers = dict(line.split(" => ", 1) for line in lines[1:])
    assert sorted(answers["kubectl-towline de"].split()) == ["deadletters", "delete", "describe"]
    assert answers["kubectl-towline runs --ph"].split() == ["--phase"]
    assert answers["kubectl-towline runs -o "].split() == ["json", "yaml", "name", "wide"]
    assert {"bash", "zsh", "fish"} <= set(answers["kubectl-towline completion "].split())


def test_argcomplete_protocol_straight_to_the_console_script(tmp_path: Path) -> None:
    """What every shell's script does: COMP_LINE/COMP_POINT in the environment, answers in a file."""
    answer = tmp_path / "answer"
    line = "kubectl-towline ru"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_STDOUT_FILENAME": str(answer), "_ARGCOMPLETE_IFS": "\n"}
    result = subprocess.run([str(BIN / "kubectl-towline")], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert sorted(answer.read_text().split()) == ["run", "runs"]


def test_kubectl_plugin_completion_answers_in_cobras_format() -> None:
    """kubectl 1.26+ runs `kubectl_complete-towline ARG... PARTIAL` and reads candidates, then `:DIRECTIVE`."""
    result = subprocess.run([str(BIN / "kubectl_complete-towline"), "runs", "--phase", ""], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Pending", "Running", "Waiting", "AwaitingApproval", "RetryScheduled",
                                          "Succeeded", "Failed", "Cancelled", ":4"]
    assert sorted(candidates(build_parser(), ["s"])) == ["schedule", "status", "stop", "submit", "suspend"]
    assert kubectl_answer(build_parser(), ["completion", "z"]) == "zsh\n:4\n"
    assert candidates(build_parser(), ["-n", "team", "describe", "x", "-o", ""]) == ["json", "yaml", "name"]

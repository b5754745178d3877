"""Shell completion of `kubectl towline`, from the same argparse parser the command uses (argcomplete).

Two ways in:
- `kubectl-towline <TAB>`: `kubectl towline completion bash|zsh|fish` prints argcomplete's script, which
  asks `kubectl-towline` itself (argcomplete's protocol: `_ARGCOMPLETE`, `COMP_LINE`, `COMP_POINT`).
- `kubectl towline <TAB>`: kubectl (1.26 and later) completes a plugin by running
  `kubectl_complete-towline ARG... PARTIAL` from PATH and reading cobra's answer: one candidate a line,
  then `:DIRECTIVE`. The `kubectl_complete-towline` console script answers that from the same parser.
"""

from __future__ import annotations

import io
import os
import shlex
import sys
from typing import Any

import argcomplete
from argcomplete import io as argcomplete_io
from argcomplete.finders import CompletionFinder
from argcomplete.shell_integration import shellcode

SHELLS = ("bash", "zsh", "fish")
EXECUTABLE = "kubectl-towline"
NO_FILE_COMPLETION = 4
"""cobra's ShellCompDirectiveNoFileComp: kubectl offers no file names besides our candidates."""


def completion_script(shell: str) -> str:
    """The script that registers completion of `kubectl-towline` in `shell`."""
    return str(shellcode([EXECUTABLE], shell=shell))


def autocomplete(parser: Any) -> None:
    """Answer a completion request (argcomplete sets `_ARGCOMPLETE`) and exit; return at once otherwise."""
    argcomplete.autocomplete(parser)


def complete_with(action: Any, choices: tuple[str, ...]) -> None:
    """Offer `choices` for a flag whose values argparse checks itself (not with `choices=`)."""
    action.completer = lambda **_: list(choices)  # argcomplete calls it with the parse so far


class _Answered(Exception):  # noqa: N818 - control flow out of argcomplete, not a failure
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def candidates(parser: Any, words: list[str]) -> list[str]:
    """What may follow `kubectl towline WORDS...`, the last word being the partial one (may be empty)."""
    done, partial = words[:-1], (words[-1] if words else "")
    line = " ".join([EXECUTABLE, *(shlex.quote(word) for word in done), partial])
    answer = io.StringIO()
    saved = dict(os.environ)
    os.environ.update({"_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_SUPPRESS_SPACE": "1",
                       "COMP_LINE": line, "COMP_POINT": str(len(line))})
    for name in ("_ARGCOMPLETE_SHELL", "_ARGCOMPLETE_DFS"):
        os.environ.pop(name, None)
    try:
        _InProcessFinder()(parser, output_stream=answer, exit_method=_stop)
    except _Answered as stopped:
        if stopped.code != 0:
            return []
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return [candidate for candidate in answer.getvalue().split("\n") if candidate]


class _InProcessFinder(CompletionFinder):
    """argcomplete's finder without its debug stream on file descriptor 9, which in this process may be
    somebody else's (closing it when the stream is collected)."""

    def _init_debug_stream(self) -> None:
        argcomplete_io.debug_stream = sys.stderr


def _stop(code: int = 0) -> None:
    raise _Answered(code)


def kubectl_answer(parser: Any, words: list[str]) -> str:
    """kubectl's plugin-completion answer (cobra's `__complete` output): candidates, then `:DIRECTIVE`."""
    return "".join(f"{candidate}\n" for candidate in candidates(parser, words)) + f":{NO_FILE_COMPLETION}\n"

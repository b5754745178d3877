"""Whatever a remote server or a run's input says reaches the person's terminal without its control characters.

The attacker controls the text of an error (a server a step calls, a param
echoed into a message): they want to set the terminal's title, clear the
screen, or rewrite an earlier line so an approval reads differently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from towline.k8s.client import ApiError
from towline.plugin import errors, terminal
from towline.safetext import printable

HOSTILE = "bad \x1b]0;owned\x07gateway\x1b[2J\x1b[1A\rApproved\x9b2J\x9d0;t\x85 \x00\x7f end"
PLUGIN = Path(__file__).parents[3] / "operator" / "towline" / "plugin"


def test_escape_sequences_and_c0_and_c1_controls_are_removed_newlines_and_tabs_kept() -> None:
    assert printable(HOSTILE) == "bad gatewayApproved2J0;t  end"
    assert printable("line one\n\tline two · ü ✓") == "line one\n\tline two · ü ✓"
    assert printable("title \x1b]0;never closed\nnext line") == "title \nnext line"


def test_an_api_error_carrying_escapes_prints_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    def refused() -> int:
        raise ApiError(502, HOSTILE)

    assert errors.guarded(refused, terminal.err) == 1
    written = capsys.readouterr().err
    assert "gateway" in written and "end" in written
    assert not any((ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in written), repr(written)


def test_out_writes_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    terminal.out(HOSTILE)
    assert capsys.readouterr().out == printable(HOSTILE) + "\n"


def _writes_directly(tree: ast.AST) -> list[int]:
    """Lines that print, or write to sys.stdout / sys.stderr, other than through towline.plugin.terminal."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        prints = isinstance(function, ast.Name) and function.id == "print"
        writes = (isinstance(function, ast.Attribute) and function.attr in {"write", "writelines"}
                  and isinstance(function.value, ast.Attribute) and function.value.attr in {"stdout", "stderr"})
        if prints or writes:
            lines.append(node.lineno)
    return lines


def test_every_text_the_plugin_writes_goes_through_the_terminal_module() -> None:
    sources = sorted(PLUGIN.rglob("*.py"))
    assert len(sources) > 10
    found = {str(path.relative_to(PLUGIN)): lines for path in sources if path.name != "terminal.py"
             if (lines := _writes_directly(ast.parse(path.read_text())))}
    assert found == {}, f"write through towline.plugin.terminal.out/err instead: {found}"

"""Where every line `kubectl towline` writes for a person goes: to stdout or stderr, controls removed.

Run names, step messages, remote servers' error text, pod logs and API
refusals all reach a terminal. A terminal obeys what they may carry (set the
title, clear the screen, move the cursor to rewrite an earlier line, report
text back as if typed), so every writer of the plugin calls `out` or `err`
here and nothing else prints (tests/unit/plugin/test_plugin_terminal.py checks
the sources). Machine formats pass through too: JSON and YAML already escape
control characters, so they lose nothing.
"""

from __future__ import annotations

import sys

from towline.safetext import printable


def out(text: str, end: str = "\n") -> None:
    sys.stdout.write(printable(text) + end)


def err(text: str) -> None:
    sys.stderr.write(printable(text) + "\n")

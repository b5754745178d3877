"""Text from elsewhere made safe to show: on a terminal, in Slack's mrkdwn.

Run inputs, step outputs and remote servers' error messages reach a person's
terminal (`kubectl towline describe`, a plain-text email read in a terminal
mail client) and Slack. A terminal obeys escape sequences (set the window
title, clear the screen, rewrite earlier lines, on some emulators report or
paste text back); Slack turns `<!channel>` into a mention and
`<https://x|Approve here>` into a link under words of the sender's choosing.
Pure and standard library only: the engine and the plugin both use it.
"""

from __future__ import annotations

import re

# ESC sequences whole, so their parameters and payloads (a window title, a hyperlink) go with them:
# CSI (ESC [ ... final byte), OSC/DCS/SOS/PM/APC strings (to BEL or ESC \; unterminated, to the line's end),
# and every other ESC + one byte. Then any C0 control but tab and newline, DEL, and the C1 controls
# (U+0080-U+009F: an 8-bit CSI, U+009B, is a terminal's ESC [).
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\n]*?(?:\x07|\x1b\\|(?=\n)|$)"
    r"|\x1b[^\n]?"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` without escape sequences and control characters, newlines and tabs kept."""
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))


def slack_mrkdwn(text: str) -> str:
    """`text` shown as written in a Slack message: `&`, `<`, `>` escaped as Slack asks, controls removed."""
    return printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

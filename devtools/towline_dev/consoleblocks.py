"""The commands a Markdown document shows in its ```console blocks, and one bash to type them into.

The docs write what a person types as `$ ` lines in ```console blocks (a trailing `\\` continues
the command on the next line) and what it prints as the lines after it. `console_blocks` reads
them back from chosen sections, so a test runs what the document says, and editing the document
changes what the test runs. `BashSession` runs commands one after another in a single bash
process, as a terminal does: variables (`RUN=$(...)`), the working directory, background jobs
and `$!` carry over from one command to the next, and each command's output and status are
kept apart. `fenced_blocks` is a document's ``` blocks of any kind, for the tests of its other
blocks (`towline_dev.docyaml`).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^([ \t]*)```(\S*)[ \t]*$")


@dataclass(frozen=True)
class Command:
    text: str
    """What is typed after `$ `, continuation lines included as written (`\\` and newline)."""
    output: tuple[str, ...]
    """The lines the document shows it printing (empty: it shows none)."""
    line: int
    """Where the command starts in the document (1-based)."""


@dataclass(frozen=True)
class Block:
    heading: str
    """The heading the block sits under (the nearest one above it)."""
    line: int
    """The block's opening fence (1-based)."""
    commands: tuple[Command, ...]


@dataclass(frozen=True)
class Fenced:
    info: str
    """The word after the opening ``` (`yaml`, `console`; empty for none)."""
    line: int
    """The opening fence (1-based)."""
    body: tuple[str, ...]
    """The lines between the fences, less the opening fence's indentation."""


def fenced_blocks(lines: Sequence[str]) -> list[Fenced]:
    """Every ``` block of a document's lines, in order."""
    blocks: list[Fenced] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        closing = next((j for j in range(index + 1, len(lines)) if _FENCE.match(lines[j])), None)
        if closing is None:
            raise ValueError(f"line {index + 1}: a ``` block that is never closed")
        body = tuple(text.removeprefix(fence[1]) for text in lines[index + 1:closing])
        blocks.append(Fenced(fence[2], index + 1, body))
        index = closing + 1
    return blocks


def section_lines(markdown: str, heading: str) -> tuple[int, list[str]]:
    """The lines of the section under the heading reading `heading` (any level), up to the next
    heading of the same or a higher level, and the 0-based index of its first line."""
    lines = markdown.splitlines()
    for index, line in enumerate(lines):
        match = _HEADING.match(line)
        if match and match[2] == heading:
            level = len(match[1])
            end = next((j for j in range(index + 1, len(lines))
                        if (m := _HEADING.match(lines[j])) and len(m[1]) <= level and not _in_fence(lines, j)),
                       len(lines))
            return index, lines[index:end]
    raise ValueError(f"no heading {heading!r} in the document")


def _in_fence(lines: list[str], index: int) -> bool:
    return sum(1 for line in lines[:index] if _FENCE.match(line)) % 2 == 1


def console_blocks(markdown: str, headings: Sequence[str]) -> list[Block]:
    """Every ```console block of the sections under `headings`, in the order of `headings`."""
    blocks: list[Block] = []
    for wanted in headings:
        start, lines = section_lines(markdown, wanted)
        heading, index = wanted, 0
        while index < len(lines):
            line = lines[index]
            fence = _FENCE.match(line)
            heading_match = _HEADING.match(line)
            if heading_match:
                heading = heading_match[2]
            if not fence:
                index += 1
                continue
            closing = next((j for j in range(index + 1, len(lines)) if _FENCE.match(lines[j])), None)
            if closing is None:
                raise ValueError(f"line {start + index + 1}: a ``` block that is never closed")
            if fence[2] == "console":
                body = [text.removeprefix(fence[1]) for text in lines[index + 1:closing]]
                blocks.append(Block(heading, start + index + 1, parse_console(body, start + index + 2)))
            index = closing + 1
    return blocks


def parse_console(lines: Sequence[str], first_line: int = 1) -> tuple[Command, ...]:
    """The commands of one console block's lines (`first_line`: the document's line of the first)."""
    commands: list[Command] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            if not commands:
                if line.strip():
                    raise ValueError(f"line {first_line + index}: output before any `$ ` command: {line!r}")
                index += 1
                continue
            last = commands[-1]
            commands[-1] = Command(last.text, (*last.output, line), last.line)
            index += 1
            continue
        start = index
        text = [line[2:]]
        while text[-1].endswith("\\"):
            index += 1
            if index == len(lines):
                raise ValueError(f"line {first_line + start}: the command's last line ends with `\\`")
            text.append(lines[index])
        commands.append(Command("\n".join(text), (), first_line + start))
        index += 1
    return tuple(Command(c.text, _strip_blank_tail(c.output), c.line) for c in commands)


def _strip_blank_tail(output: tuple[str, ...]) -> tuple[str, ...]:
    lines = list(output)
    while lines and not lines[-1].strip():
        lines.pop()
    return tuple(lines)


def substitute(text: str, placeholders: Mapping[str, str]) -> str:
    """`text` with each placeholder, where it stands as a word of its own (not inside a longer name),
    replaced by its value: `USER` in `--docker-username=USER`, not in `USERNAME` or `$USER_ID`."""
    for placeholder, value in placeholders.items():
        pattern = re.compile(rf"(?<![\w.$-]){re.escape(placeholder)}(?![\w-])")
        text = pattern.sub(value.replace("\\", "\\\\"), text)  # the value as it is, not a template
    return text


@dataclass(frozen=True)
class Ran:
    command: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class CommandTimedOut(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """A command did not finish in time; the message holds what it had printed."""


class BashSession:
    """One bash process (a session and process group of its own) that runs commands in turn.

    Each command runs as `{ COMMAND; } >N.out 2>N.err </dev/null` in the shell itself (not a
    subshell), so what it sets stays set; after it, the shell reports its status on a pipe.
    `set -o pipefail` is on: a failing command on the left of a pipe fails the command.
    `close()` ends the shell and whatever it left running in the background (its process group).
    """

    def __init__(self, *, cwd: Path, env: Mapping[str, str], work: Path, bash: str = "/bin/bash") -> None:
        self.cwd = cwd
        self.env = dict(env)
        self.work = work
        self.bash = bash
        self._process: subprocess.Popen[bytes] | None = None
        self._count = 0
        self._buffer = b""

    def __enter__(self) -> BashSession:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> BashSession:
        self.work.mkdir(parents=True, exist_ok=True)
        with (self.work / "bash.log").open("ab") as log:
            self._process = subprocess.Popen([self.bash, "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=log, cwd=self.cwd, env=self.env,
                                             start_new_session=True)
        self._send("set -o pipefail\n")
        return self

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def run(self, command: str, *, timeout: float) -> Ran:
        """Type `command` into the shell and wait (at most `timeout` seconds) for it to finish."""
        self._count += 1
        number = self._count
        out, err = self.work / f"{number}.out", self.work / f"{number}.err"
        marker = f"towline-console-{number}"
        started = time.monotonic()
        self._send(f"{{ {command}\n}} >{shlex.quote(str(out))} 2>{shlex.quote(str(err))} </dev/null\n"
                   f"printf '\\n%s %d\\n' {marker} \"$?\"\n")
        status = self._wait_for(marker, started + timeout)
        stdout, stderr = (path.read_text(errors="replace") if path.exists() else "" for path in (out, err))
        if status is None:
            raise CommandTimedOut(f"still running after {timeout:.0f} s: {command}\n{stdout}{stderr}")
        return Ran(command, status, stdout, stderr, time.monotonic() - started)

    def _send(self, text: str) -> None:
        if self._process is None or self._process.stdin is None:
            raise RuntimeError("the shell is not started")
        self._process.stdin.write(text.encode())
        self._process.stdin.flush()

    def _wait_for(self, marker: str, deadline: float) -> int | None:
        assert self._process is not None and self._process.stdout is not None
        pattern = re.compile(rf"^{re.escape(marker)} (\d+)$".encode(), re.MULTILINE)
        descriptor = self._process.stdout.fileno()
        while True:
            found = pattern.search(self._buffer)
            if found:
                self._buffer = self._buffer[found.end():]
                return int(found[1])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([descriptor], [], [], remaining)
            if ready:
                chunk = os.read(descriptor, 65536)
                if not chunk:
                    log = (self.work / "bash.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the shell exited (status {self._process.wait()}):\n{log}")
                self._buffer += chunk

"""The `kubectl towline ...` and `towline ...` commands the docs show, parsed by the commands' own parsers.

A command is shown in a ```console block (a `$ ` line, continuation lines included) or in an inline code
span that starts with `kubectl towline ` or `towline `. Each shell command line is cut at pipes, `;`,
`&&`, redirections, `$(`, `<(` and comments, and every piece that runs `kubectl towline` or `towline` is
handed to the parser the program itself builds (`towline.plugin.cli.build_parser`,
`towline.cli.build_parser`, and the parsers of `towline webhook send` and `towline connectors`), with
abbreviated options refused: what the docs show is what a reader types.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

from towline_dev.consoleblocks import fenced_blocks
from towline_dev.docmarkdown import Found, code_spans

_CUTS = frozenset({"|", "||", "&", "&&", ";", ";;", "(", ")", "<", ">", ">>", "<(", "$(", "2>", "2>&1"})


def typed_commands(path: Path) -> list[Found]:
    """Every `$ ` command of the document's ```console blocks (continuation lines joined), as typed."""
    lines = path.read_text().splitlines()
    return [Found(path, line, text) for block in fenced_blocks(lines) if block.info == "console"
            for line, text in _typed(block.body, block.line + 1)]


def shell_words(text: str) -> list[str]:
    """A command line's words as the shell splits them, its operators (`|`, `&&`, `$(` ...) words of their
    own and its comment left out."""
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def shown_commands(path: Path) -> list[Found]:
    """Every shell command line the document shows that runs `kubectl towline` or `towline`, as its words."""
    return [Found(path, typed.line, shlex.join(words)) for typed in typed_commands(path)
            for words in towline_commands(typed.text)]


def named_commands(path: Path) -> list[Found]:
    """Every inline code span that starts with `kubectl towline ` or with `towline ` and one of the `towline`
    command's commands: a command, or one named in prose (`kubectl towline run`) with its arguments left out.
    (`towline` before anything else is a name, as in the iptables comment `towline world uplink 1`.)"""
    from towline.cli import build_parser  # noqa: PLC0415 - the checks' only import of it

    commands = set(subcommands(build_parser()))
    return [Found(path, span.line, shlex.join(words)) for span in code_spans(path)
            if span.text.startswith("kubectl towline ")
            or (span.text.startswith("towline ") and span.text.split()[1] in commands)
            for words in towline_commands(span.text)]


def _typed(body: tuple[str, ...], first_line: int) -> Iterator[tuple[int, str]]:
    """The `$ ` commands of a console block (continuation lines joined), as (line, text); a root prompt's
    `# ` lines and the output are not read."""
    index = 0
    while index < len(body):
        if not body[index].startswith("$ "):
            index += 1
            continue
        start, text = index, [body[index][2:]]
        while text[-1].endswith("\\") and index + 1 < len(body):
            index += 1
            text.append(body[index])
        yield first_line + start, "\n".join(text)
        index += 1


def towline_commands(text: str) -> Iterator[list[str]]:
    """The pieces of one shell command line that run `kubectl towline` or `towline`, each as its words."""
    piece: list[str] = []
    for word in [*shell_words(text), ";"]:
        if word in _CUTS:
            yield from _runs_towline(piece)
            piece = []
        else:
            piece.append(word)


def _runs_towline(words: list[str]) -> Iterator[list[str]]:
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]  # VARIABLE=value before the program
    if words[:2] == ["kubectl", "towline"] or words[:1] == ["towline"]:
        yield words


def _strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser and its subcommands' parsers refusing abbreviated long options (`--foll` for `--follow`)."""
    parser.allow_abbrev = False
    for child in subcommands(parser).values():
        _strict(child)
    return parser


@functools.cache
def _built(build: Callable[[], argparse.ArgumentParser]) -> argparse.ArgumentParser:
    return _strict(build())  # parsing leaves a parser as it was, so one serves every command


def _parser_for(words: list[str]) -> tuple[Callable[[], argparse.ArgumentParser], list[str]]:
    if words[0] == "kubectl":
        from towline.plugin.cli import build_parser as plugin_parser  # noqa: PLC0415 - the checks' only import of it

        return plugin_parser, words[2:]
    if words[1:3] == ["webhook", "send"]:
        from towline.triggers.ingress.send import build_parser as send_parser  # noqa: PLC0415

        return send_parser, words[3:]
    if words[1:2] == ["connectors"]:
        from towline.plugin.connectors import offline_parser  # noqa: PLC0415

        return offline_parser, words[2:]
    from towline.cli import build_parser as towline_parser  # noqa: PLC0415

    return towline_parser, words[1:]


def parse_error(words: list[str]) -> str | None:
    """What the program's own parser says about a command's words (`kubectl towline ...` or `towline ...`),
    or None if it takes them; `--help` is taken."""
    build, argv = _parser_for(words)
    parser = _built(build)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            return said.getvalue().strip().splitlines()[-1] if said.getvalue().strip() else f"exit {exit_.code}"
    return None


def name_error(words: list[str]) -> str | None:
    """For a command named in prose, whose arguments may be left out: what its parser says about the words
    given (the subcommands and each option), or None if they all exist."""
    error = parse_error(words)
    left_out = "the following arguments are required" in error if error else False
    placeholder = bool(error) and "invalid choice: '" in str(error) and any(_placeholder(word) for word in words)
    if error is None or not (left_out or placeholder):
        return error
    build, argv = _parser_for(words)
    parser = _built(build)
    for word in argv:
        if word.startswith("-") and len(word) > 1:
            option = word.split("=", 1)[0]
            if option not in parser._option_string_actions:
                return f"{parser.prog}: no option {option} (see `{parser.prog} --help`)"
            continue
        commands = subcommands(parser)
        if word in commands:
            parser = commands[word]
        elif commands and not _placeholder(word):
            return f"{parser.prog}: no command {word!r} (see `{parser.prog} --help`)"
    return None


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's commands and their parsers (none: {})."""
    for action in parser._actions:  # argparse keeps subcommands' parsers here
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices
            return choices
    return {}


def _placeholder(word: str) -> bool:
    """`COMMAND`, `...`: a word the prose puts where any command goes."""
    return word == "..." or word.isupper()

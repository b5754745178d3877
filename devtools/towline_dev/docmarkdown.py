"""What the user documentation says outside its code blocks: paragraphs, inline code spans, links and the
anchors its headings make, each with the line it stands on.

The docs checks (tests/unit/docs/) read the documents through this module so that each check is about one
kind of claim (a command, a chart value, a link, a list of names) wherever a document makes it, and every
failure names the file and line. Headings' anchors follow GitHub's rules (github-slugger): the heading's
text as rendered, lower-cased, every character but letters, digits, `_`, `-` and spaces dropped, spaces
made `-`, and a repeated anchor given `-1`, `-2` ... in document order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.consoleblocks import fenced_blocks

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"")
_HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:id|name)=\"([^\"]+)\"")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
_NOT_IN_ANCHOR = re.compile(r"[^\w\- ]")


def user_docs(root: Path = REPO_ROOT) -> list[Path]:
    """The documents a user reads: README.md, CONTRIBUTING.md, examples/README.md and docs/**/*.md."""
    named = [root / "README.md", root / "CONTRIBUTING.md", root / "examples" / "README.md"]
    return [path for path in named if path.is_file()] + sorted((root / "docs").rglob("*.md"))


@dataclass(frozen=True)
class Found:
    """Something a document says, and where: `relative` is the file as the repository names it."""

    path: Path
    line: int
    text: str

    def where(self, root: Path = REPO_ROOT) -> str:
        try:
            return f"{self.path.relative_to(root)}:{self.line}"
        except ValueError:
            return f"{self.path}:{self.line}"


def prose(lines: list[str]) -> list[tuple[int, str]]:
    """The document's lines outside ``` blocks, as (1-based line, text); a block's lines are left out."""
    inside: set[int] = set()
    for block in fenced_blocks(lines):
        inside.update(range(block.line, block.line + len(block.body) + 2))
    return [(number, text) for number, text in enumerate(lines, start=1) if number not in inside]


def paragraphs(path: Path) -> list[Found]:
    """The runs of non-blank prose lines (a table, a list, a paragraph), joined by newlines, from their first
    line; a heading is a paragraph of its own."""
    found: list[Found] = []
    current: list[tuple[int, str]] = []

    def close() -> None:
        if current:
            found.append(Found(path, current[0][0], "\n".join(text for _, text in current)))
            current.clear()

    last = 0
    for number, text in prose(path.read_text().splitlines()):
        if number != last + 1 or not text.strip() or _HEADING.match(text):
            close()
        if _HEADING.match(text):
            found.append(Found(path, number, text))
        elif text.strip():
            current.append((number, text))
        last = number
    close()
    return found


def _line_of(paragraph: Found, offset: int) -> int:
    return paragraph.line + paragraph.text.count("\n", 0, offset)


def code_spans(path: Path) -> list[Found]:
    """Every inline code span outside ``` blocks, its text with line breaks made spaces."""
    spans: list[Found] = []
    for paragraph in paragraphs(path):
        for match in _SPAN.finditer(paragraph.text):
            text = " ".join(match[2].split())
            spans.append(Found(path, _line_of(paragraph, match.start()), text))
    return spans


def _without_code(text: str) -> str:
    return _SPAN.sub(lambda match: re.sub(r"[^\n]", " ", match[0]), text)


def links(path: Path) -> list[Found]:
    """Every link and image target outside code: Markdown's `[text](target)`, reference definitions and
    HTML's href and src."""
    found: list[Found] = []
    for paragraph in paragraphs(path):
        text = _without_code(paragraph.text)
        for pattern in (_LINK, _HTML_LINK):
            found += [Found(path, _line_of(paragraph, match.start()), match[1]) for match in pattern.finditer(text)]
        for offset, line in enumerate(text.splitlines()):
            if reference := _REFERENCE.match(line):
                found.append(Found(path, paragraph.line + offset, reference[1]))
    return found


def rendered(heading: str) -> str:
    """A heading's text as GitHub shows it: links as their text, code and HTML tags without their marks."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"<[^>]+>", "", text).strip()


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading (before duplicates are numbered)."""
    return _NOT_IN_ANCHOR.sub("", rendered(heading).lower()).replace(" ", "-")


def headings(path: Path) -> list[Found]:
    """The document's headings (the text after the `#`s) outside ``` blocks."""
    return [Found(path, number, match[2]) for number, text in prose(path.read_text().splitlines())
            if (match := _HEADING.match(text))]


def anchors(path: Path) -> set[str]:
    """Every #fragment that lands somewhere in the document: its headings' anchors, numbered as GitHub numbers
    repeats, and the ids of its HTML anchors."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in headings(path):
        base = slug(heading.text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    for _, text in prose(path.read_text().splitlines()):
        found.update(_HTML_ANCHOR.findall(text))
    return found


def broken_link(document: Path, target: str, root: Path = REPO_ROOT) -> str | None:
    """Why a link from `document` to `target` lands nowhere, or None if it lands: a relative path must name a
    file or directory of the repository, and a #fragment of a Markdown file one of its anchors."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None  # https:, mailto: ... : outside the repository
    path_part, _, fragment = target.partition("#")
    resolved = (document.parent / path_part).resolve() if path_part else document
    if path_part.startswith("/") or not resolved.is_relative_to(root):
        return f"{target} leaves the repository; link to a path relative to {document.name}"
    if not resolved.exists():
        return f"{target}: no file {resolved.relative_to(root)}"
    if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
        near = sorted(anchor for anchor in anchors(resolved) if fragment.split("-")[0] in anchor)[:5]
        hint = f"; its anchors like it: {', '.join(near)}" if near else ""
        return f"{target}: {resolved.relative_to(root)} has no heading whose anchor is #{fragment}{hint}"
    return None


def quoted_sections(text: str) -> Iterator[tuple[int, str, str]]:
    """Each `docs/NAME.md, "Heading"` (or `NAME.md, "Heading"`, `README, "Heading"`) in a text: a section
    named in words, as values.yaml's comments and the docs' prose name one, as (offset, file, heading)."""
    for match in re.finditer(r"((?:[\w./-]+/)?[\w.-]+\.md|\bREADME),\s+\"([^\"]+)\"", text):
        yield match.start(), match[1] if match[1] != "README" else "README.md", match[2]

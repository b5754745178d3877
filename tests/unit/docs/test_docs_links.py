"""Every link in the docs lands: a relative path names a file of the repository, a #fragment one of the
anchors GitHub gives the target's headings, and a section named in words (`docs/runtime.md, "Several
active replicas"`, as values.yaml's comments name them) is a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

from towline_dev import REPO_ROOT
from towline_dev.chartvalues import CHART
from towline_dev.docmarkdown import Found, anchors, broken_link, headings, links, quoted_sections, rendered, user_docs

VALUES = CHART / "values.yaml"


def link_problems(documents: list[Path], root: Path = REPO_ROOT) -> list[str]:
    return [f"{link.where(root)}: {why}" for document in documents for link in links(document)
            if (why := broken_link(document, link.text, root))]


def section_problems(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """Sections named as `FILE.md, "Heading"` in `path`, and `FILE.md#anchor` in values.yaml's comments."""
    text = path.read_text()
    problems = []
    for offset, name, heading in quoted_sections(text):
        where = Found(path, text.count("\n", 0, offset) + 1, name).where(root)
        target = next((base / name for base in (path.parent, root) if (base / name).is_file()), None)
        if target is None:
            problems.append(f"{where}: no file {name}")
            continue
        wanted = " ".join(heading.split())
        if not any(rendered(found.text).startswith(wanted) for found in headings(target)):
            problems.append(f"{where}: {name} has no heading {wanted!r}; its headings: "
                            f"{', '.join(rendered(found.text) for found in headings(target))[:300]}")
    if path.suffix == ".yaml":
        for match in re.finditer(r"((?:docs/)?[\w-]+\.md)(#[\w-]+)?", text):
            where = Found(path, text.count("\n", 0, match.start()) + 1, match[0]).where(root)
            name = match[1] if (root / match[1]).is_file() else f"docs/{match[1]}"
            if why := broken_link(root / "values.yaml", name + (match[2] or ""), root):
                problems.append(f"{where}: {why}")
    return problems


def test_every_link_and_anchor_in_the_docs_lands() -> None:
    assert link_problems(user_docs()) == []


def test_every_section_the_docs_and_values_yaml_name_in_words_exists() -> None:
    problems = [problem for path in [*user_docs(), VALUES] for problem in section_problems(path)]
    assert problems == []


def test_anchors_follow_githubs_rules() -> None:
    readme = anchors(REPO_ROOT / "README.md")
    assert {"4-install-the-kubectl-towline-plugin", "kubectl-towline", "what-towline-is-and-when-to-pick-it"} <= readme


def test_a_repeated_heading_gets_a_numbered_anchor_and_a_link_may_name_it(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Use\n\n## Logs\n\ntext\n\n## Logs\n\n## `kubectl towline` (the plugin)\n")
    assert anchors(tmp_path / "a.md") == {"use", "logs", "logs-1", "kubectl-towline-the-plugin"}


def test_a_link_to_a_missing_anchor_or_file_fails_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Several active replicas (shards)\n")
    (tmp_path / "a.md").write_text(
        "# A\n\nSee [b](docs/b.md#several-active-replicas-shards) and [here](#a).\n\n"
        "See [b](docs/b.md#several-active-replicas)\nor [c](docs/c.md), `[not](a-link.md)`.\n\n"
        "```console\n$ [also](not-a-link.md)\n```\n")
    assert link_problems([tmp_path / "a.md"], tmp_path) == [
        "a.md:5: docs/b.md#several-active-replicas: docs/b.md has no heading whose anchor is "
        "#several-active-replicas; its anchors like it: several-active-replicas-shards",
        "a.md:6: docs/c.md: no file docs/c.md",
    ]


def test_a_section_named_in_words_must_be_a_heading_of_that_file(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "runtime.md").write_text("# Runtime\n\n### Several active replicas (shards)\n")
    (tmp_path / "docs" / "operating.md").write_text("# Operating\n")
    (tmp_path / "values.yaml").write_text(
        '# (docs/runtime.md, "Several active replicas")\nshards: 1\n'
        '# (docs/operating.md, "Several active replicas")\nreplicas: 2\n# docs/operating.md#logs\nx: 1\n')
    assert section_problems(tmp_path / "values.yaml", tmp_path) == [
        "values.yaml:3: docs/operating.md has no heading 'Several active replicas'; its headings: Operating",
        "values.yaml:5: docs/operating.md#logs: docs/operating.md has no heading whose anchor is #logs",
    ]

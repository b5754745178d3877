"""Every chart value the docs name exists in values.schema.json, and every value in values.yaml is explained
by a comment: the docs and the chart's own file never promise a knob the chart does not have.

A value is named in these ways: an inline code span whose first part is a top-level key of values.yaml
(`archive.enabled`, `operator.shards`, `egress.requireIsolation=false`; a trailing `.*` names a mapping);
any dotted code span right after the words "chart value(s)"; the first column of a table headed `value`
(`stepPods.imagePullSecrets`, `.nodeSelector` for its sibling; `operator`, `ingress`: `nodeSelector` for
each of the pairs); a `--set`, `--set-string`, `--set-json` or `--set-file` of a command the docs show or of
a `helm ...` code span; and a ```yaml block marked `<!-- not-applied: chart values ... -->`, every path.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import yaml

from towline_dev.chartvalues import CHART, schema, schema_at, uncommented_values, values
from towline_dev.consoleblocks import fenced_blocks
from towline_dev.doccommands import shell_words, typed_commands
from towline_dev.docmarkdown import Found, code_spans, paragraphs, user_docs

NOT_VALUES = {
    "tests.suite": "the test suite's module (CONTRIBUTING.md)",
    "tests.workers.longest_first": "a function of the test suite",
    "operator.log": "the session operator's log file",
    "ingress.log": "the session ingress's log file",
    "archive.towline.dev": "the archive's API group",
    "egress.ports": "a StepType's field (spec.egress.ports)",
    "ingress.replcas": "misspelt on purpose: docs/configuration.md shows the install refusing it",
}
"""Names that read like a chart value and are something else, with what they are."""

_DOTTED = re.compile(r"^([a-z][A-Za-z0-9]*(?:\.(?:[A-Za-z][\w-]*|\*)|\[\d*\])+)(?:\s*[=:].*)?$")
_SET = ("--set", "--set-string", "--set-json", "--set-file")


def _path(text: str) -> str:
    return re.sub(r"\[\d*\]", "[]", text)


def named_values(document: Path) -> list[Found]:
    """The chart values `document` names, each as its dotted path (`[]` for a list's items)."""
    top = set(values())
    found = [Found(document, span.line, _path(match[1])) for span in code_spans(document)
             if (match := _DOTTED.match(span.text)) and match[1].split(".")[0] in top and span.text not in NOT_VALUES]
    for paragraph in paragraphs(document):
        for match in re.finditer(r"chart values?\s+`([a-z][\w.\[\]*-]*\.[\w.\[\]*-]+)", paragraph.text, re.I):
            found.append(Found(document, paragraph.line + paragraph.text.count("\n", 0, match.start()), match[1]))
        found += _table_values(paragraph)
    helm = [Found(document, span.line, span.text) for span in code_spans(document) if span.text.startswith("helm ")]
    for typed in [*typed_commands(document), *helm]:
        words = shell_words(typed.text)
        for flag, value in itertools.pairwise(words):
            if flag in _SET:
                found += [Found(document, typed.line, key) for key in _set_keys(flag, value)]
        for word in words:
            flag, _, value = word.partition("=")
            if flag in _SET and value:
                found += [Found(document, typed.line, key) for key in _set_keys(flag, value)]
    lines = document.read_text().splitlines()
    for block in fenced_blocks(lines):
        above = lines[block.line - 2] if block.line > 1 else ""
        if block.info == "yaml" and re.match(r"<!--\s*not-applied:\s*chart values", above):
            loaded: Any = yaml.safe_load("\n".join(block.body))
            found += [Found(document, block.line, path) for path in _leaf_paths(loaded)]
    return found


def _table_values(table: Found) -> list[Found]:
    """The values the first column of a table headed `value` names."""
    rows = table.text.splitlines()
    if not rows or not re.match(r"^\|\s*value\s*\|", rows[0]):
        return []
    found = []
    for offset, row in enumerate(rows[2:], start=2):
        cell = row.strip("|").split(" | ")[0]
        heads, _, tails = cell.rpartition(":") if re.search(r"`:\s", cell) else ("", "", cell)
        prefixes = re.findall(r"`([^`]+)`", heads) or [""]
        last = ""
        for written in re.findall(r"`([^`]+)`", tails):
            # `.nodeSelector`: a sibling of the value before it
            name = last.rsplit(".", 1)[0] + written if written.startswith(".") else written
            last = name
            found += [Found(table.path, table.line + offset, _path(f"{prefix}.{name}" if prefix else name))
                      for prefix in prefixes]
    return found


def _set_keys(flag: str, value: str) -> list[str]:
    """The value paths of one `--set` (several, comma-separated, outside `{}` and `[]`) or `--set-json` ...."""
    assignments = re.split(r",(?![^{\[]*[}\]])", value) if flag == "--set" else [value]
    keys = [_path(assignment.split("=", 1)[0]) for assignment in assignments]
    return [key for key in keys if key not in NOT_VALUES]


def _leaf_paths(value: Any, path: str = "") -> list[str]:
    """The paths of a values block, not looking into a map the schema leaves free (labels, selectors)."""
    node = schema_at(path, schema()) if path else None
    free = node is not None and not node.get("properties")  # a map whose keys are the user's
    if isinstance(value, dict) and not free:
        return [leaf for key, child in value.items() for leaf in _leaf_paths(child, f"{path}.{key}" if path else key)]
    return [path] if path else []


def unknown_values(documents: list[Path], root: Path | None = None) -> list[str]:
    known = schema()
    problems = []
    for document in documents:
        for named in named_values(document):
            path = named.text.removesuffix(".*")
            if schema_at(path, known) is None:
                problems.append(f"{named.where(root) if root else named.where()}: {named.text} is not a chart value "
                                f"(charts/towline/values.schema.json); name one it has, or add it to the chart")
    return problems


def test_every_chart_value_the_docs_name_is_in_the_schema() -> None:
    assert unknown_values(user_docs()) == []


def test_the_docs_name_chart_values_in_each_of_the_three_ways() -> None:
    # A reader that found nothing would pass the test above whatever the docs say.
    named = {found.text for document in user_docs() for found in named_values(document)}
    assert {"archive.enabled", "networkPolicy.apiServer.ports", "stepPods.nodeSelector"} <= named


def test_every_value_in_values_yaml_has_a_comment() -> None:
    missing = [f"charts/towline/values.yaml:{line}: {path}"
               for line, path in uncommented_values((CHART / "values.yaml").read_text())]
    assert missing == [], "explain each in a comment above it (or after it on its line)"


def test_a_value_without_a_comment_is_found_unless_its_parent_explains_it() -> None:
    text = ("# The image.\nimage:\n  tag: ''\n  pullPolicy: IfNotPresent\n"
            "operator:\n  replicas: 2   # how many\n  # Its level.\n  logLevel: info\n  podAnnotations: {}\n"
            "  resources:\n    requests: {cpu: 50m}\n")
    assert uncommented_values(text) == [(5, "operator"), (9, "operator.podAnnotations"),
                                        (10, "operator.resources"), (11, "operator.resources.requests")]


def test_a_value_the_chart_lacks_fails_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "Set `archive.enabled=false`, `operator.shards`, `ingress.expose.ingress.*`; not `archive.enable`.\n\n"
        "```console\n$ helm install t charts/towline --set web.url=x,image.tag=1 \\\n"
        "    --set-json 'networkPolicy.apiServer.ports=[1]' --set-string=stepPods.nodeSelektor.a=b\n```\n\n"
        "<!-- not-applied: chart values (helm install --values), not an object -->\n"
        "```yaml\narchive:\n  persistence: {size: 1Gi, storageClas: fast}\n```\n")
    assert unknown_values([tmp_path / "a.md"], tmp_path) == [
        f"a.md:{line}: {path} is not a chart value (charts/towline/values.schema.json); name one it has, or add it "
        "to the chart" for line, path in ((1, "archive.enable"), (4, "web.url"),
                                          (4, "stepPods.nodeSelektor.a"), (9, "archive.persistence.storageClas"))]

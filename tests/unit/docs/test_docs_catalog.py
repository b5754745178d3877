"""Where the docs list the webhook schemes or the built-in actions, they list every one the code knows.

A list is a run of three or more names joined by commas, "and", "or" or `|` (`GitHub, Standard Webhooks,
HMAC, bearer`; `http.request`, `webhook.send`, ...), spelt as the code spells them or with a space for the
hyphen, in any case. The paragraph, table or heading holding the run must name every scheme (every action),
or every one of a subset the code itself defines, which SUBSETS names with what it is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from towline.api.webhooks import WebhookScheme
from towline.api.workflow import ApprovalNotification
from towline.triggers.ingress.providers import PROVIDER_SCHEMES
from towline_connectors.registry import list_actions
from towline_dev.docmarkdown import paragraphs, user_docs

SCHEMES = frozenset(get_args(WebhookScheme)) - {"none"}  # `none` is the absence of a signature, not a scheme
ACTIONS = frozenset(spec.name for spec in list_actions())
SUBSETS = {
    PROVIDER_SCHEMES: "the providers' own schemes (docs/ingress.md, \"GitLab, Slack, Stripe and Shopify\")",
    frozenset({"standard-webhooks", "hmac", "slack", "stripe"}): "the schemes that sign a timestamp",
    frozenset(get_args(ApprovalNotification.model_fields["action"].annotation)): "the actions a notification uses",
}
"""Sets of names a list may stand for instead of all of them, each with what it is."""


def _spelt(name: str) -> str:
    return re.escape(name).replace(r"\-", "[- ]")


def _names(text: str, names: frozenset[str]) -> set[str]:
    return {name for name in names if re.search(rf"(?<![\w.-]){_spelt(name)}(?![\w-])", text, re.IGNORECASE)}


def _run(names: frozenset[str]) -> re.Pattern[str]:
    item = r"[`*]*(?:" + "|".join(_spelt(name) for name in sorted(names, key=len, reverse=True)) + r")[`*]*"
    joint = r"(?:\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\|)"
    return re.compile(rf"(?<![\w.-]){item}(?:{joint}{item}){{2,}}(?![\w-])", re.IGNORECASE)


def incomplete_lists(documents: list[Path], names: frozenset[str], what: str, root: Path | None = None) -> list[str]:
    problems = []
    for document in documents:
        for paragraph in paragraphs(document):
            run = _run(names).search(paragraph.text)
            if run is None:
                continue
            listed = _names(run[0], names)
            named = _names(paragraph.text, names)
            wholes = [names] + [subset for subset in SUBSETS if listed <= subset <= names]
            if not any(whole <= named for whole in wholes):
                where = paragraph.where(root) if root else paragraph.where()
                problems.append(f"{where}: lists {what} ({' '.join(run[0].split())}) without "
                                f"{', '.join(sorted(names - named))}; list every one the code knows")
    return problems


def test_every_list_of_webhook_schemes_names_them_all() -> None:
    assert incomplete_lists(user_docs(), SCHEMES, "webhook schemes") == []


def test_every_list_of_built_in_actions_names_them_all() -> None:
    assert incomplete_lists(user_docs(), ACTIONS, "built-in actions") == []


def test_the_code_knows_the_schemes_and_actions_the_docs_are_held_to() -> None:
    # The lists the docs are checked against are the code's: a registry read empty would check nothing.
    assert {"github", "standard-webhooks", "shopify"} <= SCHEMES and {"http.request", "code.wasm"} <= ACTIONS
    assert all(subset < SCHEMES or subset < ACTIONS for subset in SUBSETS)


def test_a_list_missing_a_scheme_fails_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# Webhooks\n\nSignatures verified (GitHub, Standard Webhooks, HMAC,\nbearer).\n\n"
        "Timestamps: `standard-webhooks`, `hmac`, `slack` and `stripe`. Try `--scheme gitlab|slack|stripe|shopify`.\n\n"
        "Steps: `http.request`, `webhook.send`, `notify.slack`, `notify.email`, `ai.chat`, `data.transform`.\n")
    assert incomplete_lists([tmp_path / "a.md"], SCHEMES, "webhook schemes", tmp_path) == [
        "a.md:3: lists webhook schemes (GitHub, Standard Webhooks, HMAC, bearer) without gitlab, shopify, slack, "
        "stripe; list every one the code knows"]
    assert incomplete_lists([tmp_path / "a.md"], ACTIONS, "built-in actions", tmp_path) == [
        "a.md:8: lists built-in actions (`http.request`, `webhook.send`, `notify.slack`, `notify.email`, `ai.chat`, "
        "`data.transform`) without code.python, code.wasm; list every one the code knows"]

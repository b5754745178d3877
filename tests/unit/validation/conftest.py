"""A fake action catalog and a one-call validator, so each test states only its manifest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from towline.api.workflow import ValidationError
from towline.validation import validate_workflow_manifest
from towline_connectors.spec import url_destination


class FakeCatalog:
    """Three actions; http.request requires `url`, notify.slack reads credential `slack` by default."""

    def known_actions(self) -> list[str]:
        return ["ai.chat", "http.request", "notify.slack"]

    def validate_inputs(self, action: str, inputs: Mapping[str, Any]) -> list[str]:
        if action == "http.request" and "url" not in inputs:
            return ["with.url: required; give the absolute http(s) URL to call"]
        if action == "ai.chat" and not isinstance(inputs.get("messages", []), list):
            return ["with: messages must be a list"]
        return []

    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        return action != "ai.chat" and inputs.get("method", "GET") != "GET"

    def credential_refs(self, action: str, inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
        if action == "notify.slack" and "webhook" not in inputs:
            return [("slack", "url")]
        return []

    def credential_slots(self, action: str) -> list[str] | None:
        return None

    def is_code(self, action: str) -> bool:
        return False

    def why_unavailable(self, action: str) -> str | None:
        return None

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """The host of `with.url` as written (None when templated); notify.slack always posts to Slack."""
        if action == "notify.slack":
            return ["hooks.slack.com"]
        return [d.host for d in url_destination(inputs["url"])] if "url" in inputs else []


Check = Callable[[dict[str, Any]], list[ValidationError]]


@pytest.fixture
def catalog() -> FakeCatalog:
    return FakeCatalog()


@pytest.fixture
def check(catalog: FakeCatalog) -> Check:
    """Validate a raw spec (as the API server hands it over) and return the problems."""

    def run(spec: dict[str, Any]) -> list[ValidationError]:
        return validate_workflow_manifest(spec, catalog)[1]

    return run


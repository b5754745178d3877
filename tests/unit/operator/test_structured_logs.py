"""Structured logs: JSON lines with run/step/attempt context, and redaction of known credential values."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from towline.logs import configure_logging, log_context, remember_secret

SIGNING_SECRET = "whsec_c2lnbmluZy1zZWNyZXQtZm9yLXRlc3Rz"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    handler = configure_logging("info", "json")
    handler.setStream(stream)  # type: ignore[attr-defined]
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def lines(stream: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_every_line_carries_the_context_it_was_logged_in(captured: io.StringIO) -> None:
    log = logging.getLogger("towline.test")
    with log_context(namespace="team", run="nightly-1"):
        log.info("reconciling")
        with log_context(step="check", attempt=2):
            log.info("created Job %s", "nightly-1-check-2")
    log.info("outside")
    first, second, third = lines(captured)
    assert first["message"] == "reconciling" and (first["namespace"], first["run"]) == ("team", "nightly-1")
    assert "step" not in first
    assert second["message"] == "created Job nightly-1-check-2"
    assert (second["run"], second["step"], second["attempt"]) == ("nightly-1", "check", "2")
    assert second["level"] == "info" and second["logger"] == "towline.test" and second["time"].endswith("+00:00")
    assert "run" not in third


def test_concurrent_reconciles_never_mix_their_context(captured: io.StringIO) -> None:
    log = logging.getLogger("towline.test")

    async def reconcile(run: str) -> None:
        with log_context(run=run):
            await asyncio.sleep(0)
            log.info("pass of %s", run)

    async def both() -> None:
        await asyncio.gather(reconcile("a"), reconcile("b"))

    asyncio.run(both())
    seen = sorted((line["message"], line["run"]) for line in lines(captured))
    assert seen == [("pass of a", "a"), ("pass of b", "b")]


def test_a_known_secret_is_redacted_from_message_arguments_and_tracebacks(captured: io.StringIO) -> None:
    remember_secret(SIGNING_SECRET)
    log = logging.getLogger("towline.test")
    log.warning("signature check with %s failed", SIGNING_SECRET)
    try:
        raise ValueError(f"bad key {SIGNING_SECRET!r}")
    except ValueError:
        log.exception("verifier crashed")
    text = captured.getvalue()
    assert SIGNING_SECRET not in text and "[REDACTED]" in text
    assert all(line["message"] for line in lines(captured)), "every line is still valid JSON"


def test_an_unknown_format_or_context_field_is_refused() -> None:
    with pytest.raises(ValueError, match="use text or json"):
        configure_logging("info", "xml")
    with pytest.raises(ValueError, match="unknown log context fields"), log_context(user="bob"):
        pass

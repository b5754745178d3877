"""The operator with its events sink set, for the tests that receive Towline's CloudEvents (in Python or in Go)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from tests.keptlogs import kept_logs_root

from towline_dev.install import OperatorProcess


@contextmanager
def operator_with_sink(session_operator: OperatorProcess, tmp_path: Path, url: str, secret: str,
                       **settings: str) -> Iterator[OperatorProcess]:
    """The session operator restarted with events.sink set (its signing secret in a file, as the chart mounts it)."""
    secret_file = tmp_path / "signing-secret"
    secret_file.write_text(secret)
    session_operator.stop()
    env = {"TOWLINE_EVENTS_SINK_URL": url, "TOWLINE_EVENTS_SECRET_FILE": str(secret_file),
           "TOWLINE_EVENTS_MAX_ATTEMPTS": "3", **settings}
    sinking = replace(session_operator, settings={**session_operator.settings, **env},
                      log_path=tmp_path / "operator.log", process=None)
    try:
        yield sinking.start()
    finally:
        sinking.stop()
        (kept_logs_root() / f"operator-events-{tmp_path.name}.log").write_bytes(Path(sinking.log_path).read_bytes())
        session_operator.start()

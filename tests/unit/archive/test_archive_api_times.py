"""The archive API's times: read and written in the operator's one RFC 3339 form (towline_connectors.wire)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from tests import archivereader

from towline.archive.apiobjects import ApiProblem, archived_run, history_query, since_of


def test_an_archived_runs_times_are_whole_seconds_in_utc_as_the_api_server_writes_them() -> None:
    started = datetime(2025, 7, 1, 10, 0, 5, 654321, tzinfo=timezone(timedelta(hours=2)))
    shown = archived_run(archivereader.archived_run("team-a", "deploy-1", seq=1, started=started, minutes=3))
    assert shown["startedAt"] == shown["metadata"]["creationTimestamp"] == "2025-07-01T08:00:05Z"
    assert shown["finishedAt"] == "2025-07-01T08:03:05Z"


@pytest.mark.parametrize("written", ["2025-07-02T00:00:00Z", "2025-07-02T00:00:00z", "2025-07-02T02:00:00+02:00"])
def test_since_and_until_read_any_rfc_3339_form_as_the_same_instant(written: str) -> None:
    query = history_query("team-a", {"since": written, "until": written})
    assert query.started_from == query.started_before == datetime(2025, 7, 2, tzinfo=UTC)
    assert since_of({"since": written}) == datetime(2025, 7, 2, tzinfo=UTC)


@pytest.mark.parametrize("written", ["2025-07-02T00:00:00", "2025-07-02", "next tuesday"])
def test_a_time_without_its_zone_is_refused_naming_the_parameter_and_the_form(written: str) -> None:
    with pytest.raises(ApiProblem) as refused:
        history_query("team-a", {"until": written})
    assert refused.value.code == 400
    assert f"until={written!r}" in refused.value.message and "until=2025-07-01T00:00:00Z" in refused.value.message

"""A scheduled run's name: the same slot always gives the same DNS label, so nothing fires twice."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from towline.api.common import IDENTIFIER_PATTERN
from towline.triggers.schedule import scheduled_run_name

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SLOT = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def test_scheduled_run_name_joins_workflow_trigger_and_slot() -> None:
    assert scheduled_run_name("renewal-watch", "weekdays", SLOT) == "renewal-watch-weekdays-202611300800"


def test_the_slot_is_named_in_utc() -> None:
    berlin = SLOT.astimezone(timezone(timedelta(hours=1)))
    assert scheduled_run_name("renewal-watch", "weekdays", berlin) == "renewal-watch-weekdays-202611300800"


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?", fullmatch=True),
       st.from_regex(IDENTIFIER_PATTERN, fullmatch=True))
def test_scheduled_run_name_is_a_dns_label_that_keeps_the_slot(workflow: str, trigger: str) -> None:
    name = scheduled_run_name(workflow, trigger, SLOT)
    assert len(name) <= 63 and DNS_LABEL.match(name)
    assert name.endswith("-202611300800")


def test_long_names_are_shortened_with_a_hash_and_stay_distinct() -> None:
    workflow = "a-very-long-workflow-name-that-a-team-chose-for-its-nightly-export"
    first = scheduled_run_name(workflow, "nightly_crm", SLOT)
    second = scheduled_run_name(workflow, "nightly_erp", SLOT)
    assert len(first) <= 63 and len(second) <= 63
    assert first != second

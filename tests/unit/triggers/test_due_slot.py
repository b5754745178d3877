"""Which schedule slot is due: never one from before the workflow appeared, each at most once."""

from __future__ import annotations

from datetime import UTC, datetime

from towline.api.workflow import ScheduleTrigger
from towline.triggers.schedule import DueSlot, due_slot

EVERY_MINUTE = ScheduleTrigger(cron="* * * * *")


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 12, 5, 4, minute, second, tzinfo=UTC)


def test_the_slot_of_the_second_the_workflow_was_created_in_is_not_fired() -> None:
    # Created at 04:09:00.6, its creationTimestamp reads 04:09:00: the 04:09 slot came before it.
    assert due_slot(EVERY_MINUTE, now=at(9, 30), last_scheduled=None, not_before=at(9)) is None


def test_the_first_slot_after_the_creation_fires() -> None:
    assert due_slot(EVERY_MINUTE, now=at(10, 5), last_scheduled=None, not_before=at(9)) == DueSlot(at(10))


def test_only_the_most_recent_missed_slot_fires_and_never_twice() -> None:
    assert due_slot(EVERY_MINUTE, now=at(14, 1), last_scheduled=at(10), not_before=at(9)) == DueSlot(at(14))
    assert due_slot(EVERY_MINUTE, now=at(14, 40), last_scheduled=at(14), not_before=at(9)) is None


def test_a_slot_past_its_starting_deadline_is_reported_as_missed() -> None:
    late = ScheduleTrigger(cron="* * * * *", starting_deadline_seconds=10)
    missed = DueSlot(at(14), missed_deadline=True)
    assert due_slot(late, now=at(14, 30), last_scheduled=at(10), not_before=at(9)) == missed

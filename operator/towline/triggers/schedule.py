"""Cron schedules: when a trigger fires next, which slot is due, and the run it gets.

Pure: time is an argument. A run's name is derived from the workflow, the
trigger and the scheduled slot, so a restart or a second replica computing the
same slot creates the same name, and the API server's 409 makes the second
create a no-op: nothing fires twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from towline.api.workflow import ScheduleTrigger
from towline.engine.naming import MAX_NAME_LENGTH, dns_label


@dataclass(frozen=True)
class DueSlot:
    """A schedule slot that should have a run now, or the reason it is skipped."""

    slot: datetime
    missed_deadline: bool = False


def next_fire_time(schedule: ScheduleTrigger, after: datetime) -> datetime:
    """The first slot strictly after `after`, computed in the trigger's time zone, in UTC."""
    zone = ZoneInfo(schedule.time_zone)
    iterator = croniter(schedule.cron, after.astimezone(zone))
    fire: datetime = iterator.get_next(datetime)
    return fire.astimezone(UTC)


def latest_slot(schedule: ScheduleTrigger, at_or_before: datetime) -> datetime:
    """The most recent slot at or before `at_or_before` (UTC)."""
    zone = ZoneInfo(schedule.time_zone)
    # croniter's get_prev is strict, so start a microsecond later to include an exact hit.
    iterator = croniter(schedule.cron, (at_or_before + timedelta(microseconds=1)).astimezone(zone))
    slot: datetime = iterator.get_prev(datetime)
    return slot.astimezone(UTC)


def due_slot(
    schedule: ScheduleTrigger,
    *,
    now: datetime,
    last_scheduled: datetime | None,
    not_before: datetime,
) -> DueSlot | None:
    """The slot to fire now, like the CronJob controller: only the most recent missed one.

    `not_before` is when the workflow (or trigger) first appeared, so creating a
    workflow never back-fills history: only slots strictly after it count, as the
    CronJob controller counts from `Next(creationTimestamp)`. A creationTimestamp has
    whole seconds, so a workflow created at 12:09:00.6 reads as 12:09:00; the 12:09
    slot came before it and is not its to fire. A slot older than the starting
    deadline is reported as missed instead of fired late.
    """
    slot = latest_slot(schedule, now)
    if slot <= not_before or (last_scheduled is not None and slot <= last_scheduled):
        return None
    deadline = schedule.starting_deadline_seconds
    if deadline is not None and now - slot > timedelta(seconds=deadline):
        return DueSlot(slot, missed_deadline=True)
    return DueSlot(slot)


def slot_passed_while_suspended(schedule: ScheduleTrigger, *, now: datetime,
                                last_scheduled: datetime | None) -> datetime | None:
    """At a trigger's resume: the latest slot that came while it was suspended, to record as passed (not fired),
    or None to leave it to `due_slot`. Resuming backfills nothing unless the trigger's catch-up policy,
    startingDeadlineSeconds, says so: with one, the latest slot within it still runs, as after an outage."""
    if schedule.starting_deadline_seconds is not None:
        return None
    slot = latest_slot(schedule, now)
    return slot if last_scheduled is None or slot > last_scheduled else None


def scheduled_run_name(workflow: str, trigger: str, slot: datetime) -> str:
    """`<workflow>-<trigger>-<YYYYMMDDHHMM>` as a DNS label, hashed when too long."""
    suffix = "-" + slot.astimezone(UTC).strftime("%Y%m%d%H%M")
    return dns_label(f"{workflow}-{trigger}", limit=MAX_NAME_LENGTH - len(suffix)) + suffix

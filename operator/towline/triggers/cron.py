"""Fire a Workflow's due cron triggers: at most one run per slot, whatever restarts.

Run names come from the slot (`triggers.schedule.scheduled_run_name`), so a
create repeated after a crash, or by a second replica, meets a 409 and adopts
the run that exists. Concurrency policies follow CronJob's: Allow, Forbid
(skip the slot while a run is active), Replace (cancel the active runs).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime

from towline.api.common import API_VERSION
from towline.api.schedulesuspend import suspended_triggers
from towline.api.workflow import ScheduleStatus, Trigger, WorkflowSpec, WorkflowStatus
from towline.engine import TERMINAL_RUN_PHASES
from towline.jsontypes import JSON
from towline.k8s.client import KubeApi
from towline.k8s.labels import LABEL_MANAGED_BY, LABEL_TRIGGER, LABEL_WORKFLOW, MANAGER, identifier_label
from towline.k8s.runs import cancel_run, create_run, list_runs
from towline.metrics import record_schedule_fired
from towline.triggers.schedule import due_slot, next_fire_time, scheduled_run_name, slot_passed_while_suspended
from towline_connectors.wire import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)



async def fire_due_schedules(
    api: KubeApi, workflow: JSON, spec: WorkflowSpec, status: WorkflowStatus, *, now: datetime, creator: str,
    known_in_flight: Collection[str],
) -> datetime | None:
    """Create the runs that are due, update `status` in place, return the next wake-up.

    `known_in_flight`: the Workflow's unfinished runs as the watch last showed them. Forbid and Replace
    read the runs live only when it names one (it may have finished since); a run too new for the watch
    to show is not seen, as by CronJob's controller, whose informer lags the same way.
    """
    meta = workflow["metadata"]
    created_at = parse_rfc3339(meta["creationTimestamp"])
    previous = {entry.trigger: entry for entry in status.schedules}
    paused = suspended_triggers(meta.get("annotations"))
    entries: list[ScheduleStatus] = []
    for trigger in spec.triggers:
        if trigger.schedule is None:
            continue
        entry = previous.get(trigger.name) or ScheduleStatus(trigger=trigger.name)
        # A trigger seen for the first time never back-fills slots before now.
        not_before = created_at if trigger.name in previous else max(created_at, now)
        if entry.suspended and trigger.name not in paused:  # resumed in this pass
            passed = slot_passed_while_suspended(trigger.schedule, now=now, last_scheduled=entry.last_schedule_time)
            if passed is not None:
                log.info("%s/%s: %s resumed; slot %s passed while suspended, not run",
                         meta["namespace"], meta["name"], trigger.name, passed)
                entry.last_schedule_time = passed
        entry.suspended = trigger.name in paused
        if not spec.suspend and not entry.suspended:
            due = due_slot(trigger.schedule, now=now, last_scheduled=entry.last_schedule_time, not_before=not_before)
            if due is not None and due.missed_deadline:
                log.warning("%s/%s: slot %s missed its starting deadline", meta["namespace"], meta["name"], due.slot)
                entry.last_schedule_time = due.slot
            elif due is not None:
                if await _start_run(api, workflow, trigger, due.slot, creator=creator, known_in_flight=known_in_flight):
                    record_schedule_fired(meta["namespace"], meta["name"], (now - due.slot).total_seconds())
                    log.info("%s/%s: fired %s for %s", meta["namespace"], meta["name"], trigger.name, due.slot)
                entry.last_schedule_time = due.slot
        entry.next_schedule_time = None if spec.suspend or entry.suspended else next_fire_time(trigger.schedule, now)
        entries.append(entry)
    status.schedules = entries
    upcoming = [e.next_schedule_time for e in entries if e.next_schedule_time]
    fired = [e.last_schedule_time for e in entries if e.last_schedule_time]
    status.next_schedule_time = min(upcoming) if upcoming else None
    status.last_schedule_time = max(fired) if fired else None
    return status.next_schedule_time


async def _start_run(
    api: KubeApi, workflow: JSON, trigger: Trigger, slot: datetime, *, creator: str, known_in_flight: Collection[str],
) -> bool:
    """Apply the concurrency policy, then create the slot's run. False when the slot is skipped."""
    assert trigger.schedule is not None
    meta = workflow["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    run_name = scheduled_run_name(name, trigger.name, slot)
    # Second deterministic name of the slot's run, for when the first is held by an impostor.
    alternate = scheduled_run_name(name, f"{trigger.name}-{meta['uid'][:8]}", slot)
    policy = trigger.schedule.concurrency_policy
    if policy != "Allow" and set(known_in_flight) - {run_name, alternate}:
        active = [
            run for run in await list_runs(api, namespace)
            if run["spec"]["workflowRef"]["name"] == name
            and (run.get("status") or {}).get("phase") not in TERMINAL_RUN_PHASES
            and run["metadata"]["name"] not in (run_name, alternate)
        ]
        if active and policy == "Forbid":
            log.info("%s/%s: skipping slot %s, %d run(s) still active (Forbid)", namespace, name, slot, len(active))
            return False
        for run in active:
            await cancel_run(api, namespace, run["metadata"]["name"])
    body = slot_run(workflow, trigger, slot, creator, run_name)
    existing, created = await create_run(api, namespace, body)
    if created or is_slot_run(existing, body):
        return created
    # The slot's name is held by a run this schedule did not create (only trusted identities can:
    # the admission policy reserves these names). It must not pass for the slot having fired, so the
    # slot's run gets its second deterministic name; a restart finds it there.
    log.warning("%s/%s: run %s exists but did not come from this schedule; firing slot %s as %s",
                namespace, name, run_name, slot, alternate)
    existing, created = await create_run(api, namespace, slot_run(workflow, trigger, slot, creator, alternate))
    if not created and not is_slot_run(existing, body):
        log.error("%s/%s: run names %s and %s are both taken by runs this schedule did not create; slot %s "
                  "not fired", namespace, name, run_name, alternate, slot)
        return False
    return created


def slot_run(workflow: JSON, trigger: Trigger, slot: datetime, creator: str, run_name: str) -> JSON:
    assert trigger.schedule is not None
    meta = workflow["metadata"]
    name = meta["name"]
    return {
        "apiVersion": API_VERSION,
        "kind": "WorkflowRun",
        "metadata": {
            "name": run_name,
            "namespace": meta["namespace"],
            "labels": {LABEL_WORKFLOW: name, LABEL_TRIGGER: identifier_label(trigger.name), LABEL_MANAGED_BY: MANAGER},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "Workflow", "name": name, "uid": meta["uid"],
            }],
        },
        "spec": {
            "workflowRef": {"name": name},
            "params": trigger.params,
            "trigger": {"type": "schedule", "name": trigger.name, "scheduledTime": rfc3339(slot, timespec="seconds")},
            "requestedBy": creator,
        },
    }


def is_slot_run(existing: JSON, wanted: JSON) -> bool:
    """Whether an existing run is the one this schedule creates for the slot: same trigger, workflow and owner."""
    trigger, wanted_trigger = (existing.get("spec") or {}).get("trigger") or {}, wanted["spec"]["trigger"]
    owners = {owner.get("uid") for owner in (existing.get("metadata") or {}).get("ownerReferences") or []}
    return (
        all(trigger.get(key) == wanted_trigger[key] for key in ("type", "name", "scheduledTime"))
        and (existing.get("spec") or {}).get("workflowRef") == wanted["spec"]["workflowRef"]
        and wanted["metadata"]["ownerReferences"][0]["uid"] in owners
    )

"""`kubectl towline workflows` (the namespace's Workflows: Ready, last run, next schedule) and
`workflows show NAME` (params, triggers with their webhook paths, schedules, last run, validation errors).

Everything shown is the Workflow as the API server returns it: its spec as committed and the status only the
operator writes. Text is built here (pure); `list_workflows` and `show` make the calls.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from towline.api.schedulesuspend import suspended_triggers
from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin import output, render
from towline.plugin.commands import Io, NotFound
from towline.plugin.completion import complete_with
from towline_connectors.wire import parse_rfc3339

WORKFLOW_KIND = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow"}
EXAMPLES = """Examples:
  kubectl towline workflows                      # NAME, READY, SUSPENDED, LAST RUN, NEXT SCHEDULE, AGE
  kubectl towline workflows -A -o name
  kubectl towline workflows show nightly         # params, triggers and their webhook paths, schedules"""


def add_parser(sub: Any) -> None:
    text = "the namespace's Workflows: Ready, last run, next schedule; `show NAME` for one in full"
    parser: argparse.ArgumentParser = sub.add_parser(
        "workflows", help=text, description=text[0].upper() + text[1:] + ".", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    show = parser.add_argument("show", nargs="?", choices=("show",), help="show one Workflow: workflows show NAME")
    complete_with(show, ("show",))
    complete_with(parser.add_argument("name", nargs="?", metavar="NAME"), ())  # a Workflow's name, not a file
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="Workflows of every namespace you may list")
    parser.add_argument("-o", "--output", choices=output.MACHINE_FORMATS, default=None,
                        help="json/yaml: as the API server returns them; name: workflow/NAME")


def check(args: argparse.Namespace) -> str | None:
    if args.show and not args.name:
        return "workflows show needs NAME: kubectl towline workflows show nightly"
    if args.show and args.all_namespaces:
        return "workflows show reads one namespace's Workflow: use -n NAMESPACE, not -A"
    return None


def ready(workflow: JSON) -> tuple[str, str]:
    """The Ready condition's status (`Unknown` before the operator has looked) and its message."""
    status = workflow.get("status") or {}
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if condition is None:
        return "Unknown", "the operator has not looked at it yet"
    stale = status.get("observedGeneration") != (workflow.get("metadata") or {}).get("generation")
    message = condition.get("message") or condition.get("reason") or ""
    return str(condition.get("status", "Unknown")), message + (" (not yet for the latest change)" if stale else "")


def until(moment: str | None, now: datetime) -> str:
    """`in 3h` for a slot to come, the time itself otherwise; empty without one."""
    if not moment:
        return ""
    seconds = (parse_rfc3339(moment) - now).total_seconds()
    return f"in {render.span(seconds)}" if seconds >= 0 else moment


def workflows_table(workflows: list[JSON], now: datetime, *, all_namespaces: bool) -> str:
    if not workflows:
        return "No workflows."
    rows = []
    for workflow in sorted(workflows, key=lambda w: (w["metadata"].get("namespace") or "", w["metadata"]["name"])):
        meta, spec, status = workflow["metadata"], workflow.get("spec") or {}, workflow.get("status") or {}
        last = status.get("lastRun") or {}
        row = [meta["name"], ready(workflow)[0], "yes" if spec.get("suspend") else "",
               f"{last['name']} {last.get('phase', '')}".strip() if last.get("name") else "",
               until(status.get("nextScheduleTime"), now), render.age(meta.get("creationTimestamp"), now)]
        rows.append([meta.get("namespace") or "", *row] if all_namespaces else row)
    header = ["NAME", "READY", "SUSPENDED", "LAST RUN", "NEXT SCHEDULE", "AGE"]
    return render.table(["NAMESPACE", *header] if all_namespaces else header, rows)


def webhook_path(namespace: str, workflow: str, trigger: str) -> str:
    """The ingress's path for a webhook trigger (docs/ingress.md): POST it at your ingress host."""
    return f"/hooks/{namespace}/{workflow}/{trigger}"


@dataclass(frozen=True)
class ParamShown:
    name: str
    type: str
    required: bool
    has_default: bool
    default: Any
    description: str


@dataclass(frozen=True)
class TriggerShown:
    """A trigger as `workflows show` lists it; `detail` is its line's text after the name."""

    name: str
    type: str  # manual | schedule | webhook | cloudEvent
    detail: str
    cron: str | None = None
    time_zone: str | None = None
    concurrency_policy: str | None = None
    next_schedule_time: str | None = None
    last_schedule_time: str | None = None
    scheme: str | None = None
    path: str | None = None
    suspended: bool = False
    """A schedule trigger suspended by `kubectl towline schedule suspend` (its annotation)."""


@dataclass(frozen=True)
class WorkflowShown:
    """One Workflow as `kubectl towline workflows show` and the web view's workflow page show it: one model, two
    renderings (`workflow_detail` as text; the web view as JSON)."""

    name: str
    namespace: str
    generation: int | None
    ready: str
    ready_message: str
    suspended: bool
    params: tuple[ParamShown, ...]
    triggers: tuple[TriggerShown, ...]
    next_schedule_time: str | None
    last_run: tuple[str, str] | None
    problems: tuple[tuple[str, str], ...]


def _trigger_shown(namespace: str, workflow: str, trigger: JSON, slots: dict[Any, JSON],
                   paused: frozenset[str] = frozenset()) -> TriggerShown | None:
    name = trigger.get("name", "?")
    if trigger.get("schedule"):
        schedule, slot = trigger["schedule"], slots.get(name) or {}
        zone, policy = schedule.get("timeZone", "UTC"), schedule.get("concurrencyPolicy", "Allow")
        return TriggerShown(name, "schedule", f"schedule {schedule.get('cron')} ({zone}, {policy})",
                            cron=schedule.get("cron"), time_zone=zone, concurrency_policy=policy,
                            next_schedule_time=slot.get("nextScheduleTime"),
                            last_schedule_time=slot.get("lastScheduleTime"), suspended=name in paused)
    if trigger.get("webhook"):
        scheme = ((trigger["webhook"].get("verify") or {}).get("scheme")) or "?"
        path = webhook_path(namespace, workflow, name)
        return TriggerShown(name, "webhook", f"webhook ({scheme}) POST {path} at the webhook ingress "
                            "(docs/ingress.md)", scheme=scheme, path=path)
    if trigger.get("cloudEvent"):
        event = trigger["cloudEvent"]
        scheme = ((event.get("verify") or {}).get("scheme")) or "?"
        path = webhook_path(namespace, workflow, name)
        types = ", ".join(event.get("types") or [])
        return TriggerShown(name, "cloudEvent", f"cloudEvent ({scheme}) {types} POST {path} at the webhook ingress "
                            "(docs/ingress.md#cloudevents)", scheme=scheme, path=path)
    return None


def workflow_shown(workflow: JSON) -> WorkflowShown:
    meta, spec, status = workflow["metadata"], workflow.get("spec") or {}, workflow.get("status") or {}
    namespace, name = meta.get("namespace", ""), meta["name"]
    state, message = ready(workflow)
    slots = {entry.get("trigger"): entry for entry in status.get("schedules") or []}
    manual = TriggerShown("manual", "manual", f"kubectl towline run {name} (always allowed)")
    paused = suspended_triggers(meta.get("annotations"))
    triggers = [t for t in (_trigger_shown(namespace, name, trigger, slots, paused)
                            for trigger in spec.get("triggers") or []) if t is not None]
    last = status.get("lastRun") or {}
    return WorkflowShown(
        name=name, namespace=namespace, generation=meta.get("generation"), ready=state, ready_message=message,
        suspended=bool(spec.get("suspend")),
        params=tuple(ParamShown(p["name"], p.get("type", "any"), bool(p.get("required")), "default" in p,
                                p.get("default"), p.get("description", "")) for p in spec.get("params") or []),
        triggers=(manual, *triggers), next_schedule_time=status.get("nextScheduleTime"),
        last_run=(last["name"], last.get("phase", "")) if last.get("name") else None,
        problems=tuple((str(p.get("field")), str(p.get("message"))) for p in status.get("validationErrors") or []),
    )


def workflow_detail(workflow: JSON, now: datetime) -> str:
    shown = workflow_shown(workflow)
    lines = [f"Workflow {shown.name}  namespace {shown.namespace}  generation {shown.generation}",
             f"Ready {shown.ready}" + (f": {shown.ready_message}" if shown.ready_message else "")]
    if shown.suspended:
        lines.append("Suspended: no new runs start (spec.suspend); runs in flight continue")
    lines.append("Params:" if shown.params else "Params: none")
    for param in shown.params:
        default = f" = {json.dumps(param.default, ensure_ascii=False)}" if param.has_default else " (required)"
        lines.append(f"  {param.name}: {param.type}{default}")
    lines.append("Triggers:")
    for trigger in shown.triggers:
        line = f"  {trigger.name}: {trigger.detail}"
        if trigger.suspended:
            line += (f"; suspended (kubectl towline schedule resume {shown.name} {trigger.name}), "
                     f"last {trigger.last_schedule_time or 'never'}")
        elif trigger.type == "schedule":
            line += (f"; next {until(trigger.next_schedule_time, now) or 'none'}, "
                     f"last {trigger.last_schedule_time or 'never'}")
        lines.append(line)
    lines.append(f"Last run: {' '.join(shown.last_run)}".rstrip() if shown.last_run else "Last run: none")
    lines.extend(f"Problem: {field}: {message}" for field, message in shown.problems)
    return "\n".join(lines)


async def list_workflows(api: KubeApi, namespace: str | None, io: Io, form: str | None) -> int:
    found = [{**WORKFLOW_KIND, **w} for w in await session.list_workflows(api, namespace)]
    if form:
        if found or form != "name":
            io.out(output.objects(found, form))
        return 0
    io.out(workflows_table(found, datetime.now(UTC), all_namespaces=namespace is None))
    return 0


async def show(api: KubeApi, namespace: str, io: Io, name: str, form: str | None) -> int:
    workflow = await session.get_workflow(api, namespace, name)
    if workflow is None:
        raise NotFound(f"no Workflow {name!r} in namespace {namespace}; list them with `kubectl towline workflows`")
    if form:
        io.out(output.objects([{**WORKFLOW_KIND, **workflow}], form, single=True))
        return 0
    io.out(workflow_detail(workflow, datetime.now(UTC)))
    return 0

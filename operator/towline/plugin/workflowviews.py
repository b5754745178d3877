"""`kubectl towline workflows` (the namespace's Workflows: Ready, last run, next schedule) and
`workflows show NAME` (params, triggers with their webhook paths, schedules, last run, validation errors).

Everything shown is the Workflow as the API server returns it: its spec as committed and the status only the
operator writes. Text is built here (pure); `list_workflows` and `show` make the calls.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin import output, render
from towline.plugin.commands import Io, NotFound
from towline.plugin.completion import complete_with
from towline_connectors.wire import parse_rfc3339

JSON = dict[str, Any]
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


def workflow_detail(workflow: JSON, now: datetime) -> str:
    meta, spec, status = workflow["metadata"], workflow.get("spec") or {}, workflow.get("status") or {}
    state, message = ready(workflow)
    lines = [f"Workflow {meta['name']}  namespace {meta.get('namespace', '')}  generation {meta.get('generation')}",
             f"Ready {state}" + (f": {message}" if message else "")]
    if spec.get("suspend"):
        lines.append("Suspended: no new runs start (spec.suspend); runs in flight continue")
    lines.append("Params:" if spec.get("params") else "Params: none")
    for param in spec.get("params") or []:
        default = f" = {json.dumps(param['default'], ensure_ascii=False)}" if "default" in param else " (required)"
        lines.append(f"  {param['name']}: {param.get('type', 'any')}{default}")
    lines.append("Triggers:")
    lines.append("  manual: kubectl towline run " + meta["name"] + " (always allowed)")
    slots = {entry.get("trigger"): entry for entry in status.get("schedules") or []}
    for trigger in spec.get("triggers") or []:
        name = trigger.get("name", "?")
        if trigger.get("schedule"):
            schedule = trigger["schedule"]
            slot = slots.get(name) or {}
            nxt = until(slot.get("nextScheduleTime"), now) or "none"
            lines.append(f"  {name}: schedule {schedule.get('cron')} ({schedule.get('timeZone', 'UTC')}, "
                         f"{schedule.get('concurrencyPolicy', 'Allow')}); next {nxt}, "
                         f"last {slot.get('lastScheduleTime') or 'never'}")
        elif trigger.get("webhook"):
            scheme = ((trigger["webhook"].get("verify") or {}).get("scheme")) or "?"
            path = webhook_path(meta.get("namespace", ""), meta["name"], name)
            lines.append(f"  {name}: webhook ({scheme}) POST {path} at the webhook ingress (docs/ingress.md)")
    last = status.get("lastRun") or {}
    lines.append(f"Last run: {last['name']} {last.get('phase', '')}".rstrip() if last.get("name") else "Last run: none")
    for problem in status.get("validationErrors") or []:
        lines.append(f"Problem: {problem.get('field')}: {problem.get('message')}")
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

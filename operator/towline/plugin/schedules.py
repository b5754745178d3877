"""`kubectl towline schedule suspend|resume WORKFLOW [TRIGGER]`: pause a schedule trigger without a commit.

Argo's `argo cron suspend` sets a CronWorkflow's spec.suspend, which a GitOps tool then reverts or shows as
drift. Here the switch is the annotation `suspend.towline.dev/<trigger>` (towline.api.schedulesuspend),
server-side applied as its own field manager: git never sets it, so the tool that syncs the Workflow leaves it
alone. Resume applies the manager's set without the trigger, so a suspension the Workflow's manifest carries
itself stays (and is said so). Whether you may is RBAC's: patch on workflows.
"""

from __future__ import annotations

import argparse
from typing import Any

from towline.api.schedulesuspend import FIELD_MANAGER, SUSPENDED, suspend_annotation, suspended_triggers
from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import Conflict, KubeApi
from towline.plugin.commands import Io, NotFound
from towline.plugin.manifests import UsageError

VERBS = ("suspend", "resume")
GITOPS_MARKS = ("argocd.argoproj.io/", "app.kubernetes.io/instance", "kustomize.toolkit.fluxcd.io/",
                "helm.toolkit.fluxcd.io/")
"""Label and annotation keys (or prefixes) Argo CD and Flux put on what they sync."""

EXAMPLES = """Examples:
  kubectl towline schedule suspend nightly-report            # every schedule trigger of the Workflow
  kubectl towline schedule suspend nightly-report weekdays   # one trigger
  kubectl towline schedule resume nightly-report weekdays    # missed slots are not run (docs/operating.md)"""


def add_parser(sub: Any) -> None:
    text = "suspend or resume a Workflow's schedule triggers without changing git (argo cron suspend)"
    parser: argparse.ArgumentParser = sub.add_parser(
        "schedule", help=text, description=text[0].upper() + text[1:] + ".", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verb", choices=VERBS, metavar="suspend|resume")
    parser.add_argument("workflow", metavar="WORKFLOW")
    parser.add_argument("trigger", nargs="?", metavar="TRIGGER", help="a schedule trigger (default: all of them)")


async def switch(api: KubeApi, namespace: str, io: Io, args: argparse.Namespace) -> int:
    workflow = await session.get_workflow(api, namespace, args.workflow)
    if workflow is None:
        raise NotFound(f"no Workflow {args.workflow!r} in namespace {namespace}; list them with "
                       "`kubectl towline workflows`")
    chosen = chosen_triggers(workflow, args.trigger)
    if marks := gitops_marks(workflow):
        io.err(f"warning: workflow {args.workflow} is synced by a GitOps tool ({', '.join(marks)}); the switch is "
               f"the annotation {suspend_annotation('<trigger>')} of field manager {FIELD_MANAGER}, which git does "
               "not set: have Argo CD ignore that manager (docs/operating.md, \"Suspending a schedule\")")
    ours = owned_keys(workflow)
    keys = {suspend_annotation(name) for name in chosen}
    wanted = ours | keys if args.verb == "suspend" else ours - keys
    try:
        applied = await session.apply_workflow_annotations(
            api, namespace, args.workflow, dict.fromkeys(sorted(wanted), SUSPENDED), FIELD_MANAGER)
    except Conflict as error:
        io.err(f"error: {' '.join(error.message.split())}; the Workflow's manifest sets that annotation itself: "
               "change it there")
        return 1
    still = sorted(suspended_triggers((applied.get("metadata") or {}).get("annotations")) & set(chosen))
    if args.verb == "resume" and still:
        io.err(f"error: {', '.join(still)} stay suspended: the Workflow's manifest (git) sets "
               f"{suspend_annotation(still[0])}; resume it there")
        return 1
    done = "suspended" if args.verb == "suspend" else "resumed"
    io.out(f"workflow/{args.workflow} {', '.join(chosen)} {done}")
    return 0


def chosen_triggers(workflow: JSON, trigger: str | None) -> list[str]:
    """The schedule triggers named (one, or all of them), or UsageError naming the ones there are."""
    triggers = (workflow.get("spec") or {}).get("triggers") or []
    schedules = [t["name"] for t in triggers if t.get("schedule")]
    name = workflow["metadata"]["name"]
    if not schedules:
        raise UsageError(f"workflow {name} has no schedule trigger (only schedule triggers are suspended)")
    if trigger is None:
        return schedules
    if trigger not in schedules:
        others = [t["name"] for t in triggers if not t.get("schedule") and t.get("name") == trigger]
        what = "is not a schedule trigger" if others else "is not a trigger of it"
        raise UsageError(f"TRIGGER {trigger} {what}; workflow {name}'s schedule triggers: {', '.join(schedules)}")
    return [trigger]


def owned_keys(workflow: JSON) -> set[str]:
    """The suspend annotations FIELD_MANAGER applied (managedFields), so one apply keeps the others."""
    owned: set[str] = set()
    for entry in workflow["metadata"].get("managedFields") or []:
        if entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply":
            annotations = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations") or {}
            owned |= {key[2:] for key in annotations if key.startswith("f:" + suspend_annotation(""))}
    return owned


def gitops_marks(workflow: JSON) -> list[str]:
    """The Argo CD or Flux label or annotation keys the Workflow carries (the first of each kind)."""
    meta = workflow["metadata"]
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    return [next(k for k in keys if k.startswith(mark)) for mark in GITOPS_MARKS if any(k.startswith(mark)
                                                                                          for k in keys)]

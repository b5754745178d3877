"""`kubectl towline approvals [--mine] [-A] [-o ...]` and `approve|reject RUN STEP` (or an Approval's name).

A run's gate is found through the run's status, which only the operator writes:
the step's entry names its Approval (`approvalName`), and the Approval itself must
name that run and step back (spec.runName/step, immutable and set only by the
operator at creation). A label could be put on anything; it is not trusted here.
"""

from __future__ import annotations

from datetime import UTC, datetime

from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin import approvalrule, commands, output, render, views
from towline.plugin.filters import RunFilter
from towline.plugin.manifests import UsageError
from towline_connectors.wire import parse_rfc3339


def pending(approval: JSON) -> bool:
    """Still waiting for a person: not decided, and the operator has not closed it."""
    spec = approval.get("spec") or {}
    phase = (approval.get("status") or {}).get("phase") or "Pending"
    return phase == "Pending" and not spec.get("decision")


def approvers_text(spec: JSON) -> str:
    approvers = spec.get("approvers") or {}
    names = [*(approvers.get("users") or []), *(f"group:{g}" for g in approvers.get("groups") or [])]
    return ",".join(names) + (" (four eyes)" if spec.get("fourEyes") else "")


def approvals_table(approvals: list[JSON], now: datetime, *, all_namespaces: bool, wide: bool = False) -> str:
    """Oldest first per namespace; `wide` adds the run's Workflow and who requested it, and keeps the whole message."""
    if not approvals:
        return "No pending approvals."
    rows = []
    for approval in sorted(approvals, key=lambda a: (a["metadata"].get("namespace") or "",
                                                     a["metadata"].get("creationTimestamp") or "")):
        meta, spec = approval["metadata"], approval.get("spec") or {}
        expires = spec.get("expiresAt")
        left = (parse_rfc3339(expires) - now).total_seconds() if expires else None
        message = " ".join(str(spec.get("message") or "").split())
        row = [
            meta["name"], spec.get("runName", ""), spec.get("step", ""), approvers_text(spec),
            render.age(meta.get("creationTimestamp"), now),
            "" if left is None else (f"in {render.span(left)}" if left > 0 else "expired"),
            message if wide or len(message) <= 60 else message[:57] + "...",
        ]
        if wide:
            row[3:3] = [spec.get("workflowName", ""), spec.get("requestedBy", "")]
        rows.append([meta.get("namespace", ""), *row] if all_namespaces else row)
    header = ["NAME", "RUN", "STEP", "APPROVERS", "AGE", "EXPIRES", "MESSAGE"]
    if wide:
        header[3:3] = ["WORKFLOW", "REQUESTED BY"]
    return render.table(["NAMESPACE", *header] if all_namespaces else header, rows)


async def list_pending(api: KubeApi, namespace: str | None, io: commands.Io, *, only_mine: bool,
                       selector: str | None = None, narrow: RunFilter | None = None, form: str | None = None) -> int:
    """The pending Approvals of the namespace (None: every namespace), oldest first; with only_mine, those the
    admission policy would let the caller decide; `narrow` by Workflow, age and count as `runs` does."""
    found = [a for a in await session.list_approvals(api, namespace, selector=selector) if pending(a)]
    if only_mine:
        info = await session.user_info(api)
        found = approvalrule.mine(found, approvalrule.User(str(info["username"]), tuple(info.get("groups") or ())))
    now = datetime.now(UTC)
    found = (narrow or RunFilter()).apply(found, now)
    if form in output.MACHINE_FORMATS:
        if found or form != "name":
            io.out(output.objects(views.typed(found, views.APPROVAL_KIND), form))
        return 0
    io.out(approvals_table(found, now, all_namespaces=namespace is None, wide=form == "wide"))
    return 0


def gate_entries(run: JSON, step: str) -> list[JSON]:
    """The run's gate entries for `step`: the gate step itself, or the gate the operator put before it."""
    entries = (run.get("status") or {}).get("steps") or []
    return [e for e in entries if (e.get("id") == step and e.get("approvalName")) or e.get("gateFor") == step]


def approval_of_step(run: JSON, step: str) -> str:
    """The name of the pending Approval at `step` of `run`, or a UsageError saying why there is none."""
    name = run["metadata"]["name"]
    found = gate_entries(run, step)
    if len(found) > 1:
        ids = ", ".join(e["id"] for e in found)
        raise UsageError(f"step {step} of run {name} is ambiguous: gates {ids}; name the gate's own step id")
    if not found:
        entries = {e["id"]: e for e in (run.get("status") or {}).get("steps") or []}
        gates = [e["id"] for e in entries.values() if e.get("approvalName") or e.get("gateFor")]
        gates_text = f"its approval steps: {', '.join(gates)}" if gates else "it has no approval steps (yet)"
        if step in entries:
            raise UsageError(f"step {step} of run {name} is not an approval ({entries[step].get('phase', 'Pending')}); "
                             f"{gates_text}")
        raise UsageError(f"run {name} has no step {step!r}; {gates_text}")
    entry = found[0]
    phase = entry.get("phase") or "Pending"
    if phase != "Running":
        why = {"Pending": "the run has not reached it"}.get(phase, "it was decided or has ended")
        decided = f", {entry.get('reason', '').lower() or 'decided'} by {entry['decidedBy']}" \
            if entry.get("decidedBy") else ""
        raise UsageError(f"step {entry['id']} of run {name} has no pending approval: it is {phase}{decided} ({why})")
    return str(entry["approvalName"])


def pending_of_run(run: JSON) -> list[JSON]:
    return [e for e in (run.get("status") or {}).get("steps") or []
            if e.get("approvalName") and e.get("phase") == "Running"]


async def resolve(api: KubeApi, namespace: str, name: str, step: str | None) -> str:
    """The Approval that `approve NAME [STEP]` means.

    NAME STEP: that run's gate at STEP. NAME alone: the Approval of that name, else the run's one
    pending gate (ambiguous when it waits at several).
    """
    if step is None:
        if await session.get_approval(api, namespace, name) is not None:
            return name
        run = await session.get_run(api, namespace, name)
        if run is None:
            raise commands.NotFound(f"no Approval or WorkflowRun {name!r} in namespace {namespace}; "
                                    "`kubectl towline approvals` lists the pending ones")
        waiting = pending_of_run(run)
        if len(waiting) != 1:
            steps = ", ".join(e["id"] for e in waiting)
            raise UsageError(f"run {name} waits at {len(waiting)} approvals ({steps}); name the step: "
                             f"kubectl towline approve {name} STEP" if waiting else
                             f"run {name} waits at no approval ({(run.get('status') or {}).get('phase', 'Pending')})")
        approval_name = str(waiting[0]["approvalName"])
        step = str(waiting[0]["id"])
    else:
        run = await session.get_run(api, namespace, name)
        if run is None:
            raise commands.NotFound(f"no WorkflowRun {name!r} in namespace {namespace}; "
                                    "list them with `kubectl towline runs`")
        approval_name = approval_of_step(run, step)
        step = next(e["id"] for e in gate_entries(run, step))
    approval = await session.get_approval(api, namespace, approval_name)
    spec = (approval or {}).get("spec") or {}
    if approval is None or spec.get("runName") != name or spec.get("step") != step:
        raise commands.NotFound(f"the Approval {approval_name} that run {name} names for step {step} is not there "
                                "(yet); try again in a moment")
    return approval_name

"""`kubectl towline`'s daily verbs (argo's, tkn's) against the local control plane, as the people who use
them: `logs --tail/--since/--timestamps/-c` (carol, a log reader; alice is not one); `delete` by name and
by selection (alice, a workflow author; carol, a runner, may not); `run` with a param file, name, labels,
a server dry run and `-o`; `submit -f`; `resubmit` by somebody else than the requester; `workflows`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.pluginsupport import created_name, ok, towline
from tests.integration.support import apply, bind_role, get, list_objects, wait_for, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration]


def gate_only(namespace: str, name: str) -> dict[str, Any]:
    """A Workflow of one approval gate: its runs wait for bob without any step pod."""
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"params": [{"name": "n", "type": "integer", "default": 1},
                                {"name": "env", "type": "string", "default": "staging"}],
                     "steps": [{"id": "review", "approval": {"message": "go?", "approvers": {"users": ["bob"]}}}]}}


def deleted(cluster: ControlPlane, namespace: str, name: str) -> bool:
    """Gone, or going (with the archive on, a deleted run waits for it under the archive's finalizer)."""
    run = get(cluster, "workflowruns.towline.dev", name, namespace)
    return run is None or bool(run["metadata"].get("deletionTimestamp"))


def test_delete_by_name_and_selection_keeps_runs_that_have_not_ended(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    bind_role(cluster, ns, "towline-workflow-author", users=("alice",))
    apply(cluster, gate_only(ns, "gate-a"))
    apply(cluster, gate_only(ns, "gate-b"))
    started = [created_name(ok(towline(cluster, ns, "run", workflow))) for workflow in ("gate-a",) * 4 + ("gate-b",)]
    *ended_a, live, only_b = started
    for name in [*ended_a, only_b]:
        wait_for_phase(cluster, ns, name, {"AwaitingApproval"})
        ok(towline(cluster, ns, "cancel", name))
    for name in [*ended_a, only_b]:
        wait_for_phase(cluster, ns, name, {"Cancelled"})
    wait_for_phase(cluster, ns, live, {"AwaitingApproval"})

    refused = towline(cluster, ns, "delete", ended_a[0], user="carol")  # the runner role has no delete
    assert refused.returncode == 1 and "forbidden: you may not delete workflowruns.towline.dev" in refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    going = towline(cluster, ns, "delete", ended_a[0], live, user="alice")  # checked first: nothing deleted
    assert going.returncode == 2 and f"run {live} is AwaitingApproval" in going.stderr and "--force" in going.stderr
    assert "Traceback" not in going.stderr

    # Newest by creation (a second's resolution), then by name: as `runs` orders them.
    def created(name: str) -> tuple[str, str]:
        run = get(cluster, "workflowruns.towline.dev", name, ns)
        assert run is not None
        return run["metadata"]["creationTimestamp"], name

    *older, newest = sorted(ended_a, key=created)
    dry = ok(towline(cluster, ns, "delete", "--keep", "1", "--dry-run", user="alice"))
    assert dry.splitlines() == [f"workflowrun/{name} deleted (dry run)" for name in older]
    assert not any(deleted(cluster, ns, name) for name in started)

    assert ok(towline(cluster, ns, "delete", "--keep", "1", user="alice")).splitlines() == \
        [f"workflowrun/{name} deleted" for name in older]
    wait_for("the two older ended runs of gate-a to be deleted", lambda: all(
        deleted(cluster, ns, name) for name in older) or None, 60)
    assert not any(deleted(cluster, ns, name) for name in (newest, live, only_b))
    none_left = towline(cluster, ns, "delete", "-w", "gate-a", "--keep", "1", user="alice")
    assert none_left.returncode == 0 and "nothing deleted" in none_left.stderr

    assert ok(towline(cluster, ns, "delete", live, "--force", user="alice")) == f"workflowrun/{live} deleted\n"
    wait_for(f"{live} to be deleted", lambda: deleted(cluster, ns, live) or None, 60)


def test_run_submit_and_resubmit_request_as_the_caller(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, tmp_path: Path
) -> None:
    cluster, ns = towline_installed, team_namespace
    gate = gate_only(ns, "gate")
    gate["spec"]["triggers"] = [{"name": "new_year", "schedule": {"cron": "0 0 1 1 *", "timeZone": "UTC"}}]
    apply(cluster, gate)
    (tmp_path / "params.yaml").write_text("n: 7\nenv: staging\n")

    def runs() -> list[str]:
        return sorted(r["metadata"]["name"] for r in list_objects(cluster, "workflowruns.towline.dev", ns))

    dry = ok(towline(cluster, ns, "run", "gate", "--dry-run=server", "-o", "json"))
    assert json.loads(dry)["spec"]["requestedBy"] == "carol" and runs() == []  # judged by the server, not stored
    named = ok(towline(cluster, ns, "run", "gate", "--param-file", str(tmp_path / "params.yaml"), "-p", "env=prod",
                       "--name", "gate-by-hand", "--label", "tier=gold", "-o", "name"))
    assert named == "workflowrun/gate-by-hand\n"
    run = get(cluster, "workflowruns.towline.dev", "gate-by-hand", ns)
    assert run is not None and run["metadata"]["labels"]["tier"] == "gold"
    assert run["spec"]["params"] == {"n": 7, "env": "prod"} and run["spec"]["requestedBy"] == "carol"

    # bob resubmits carol's run: the same Workflow and params, requested by bob, as the API server says.
    again = towline(cluster, ns, "resubmit", "gate-by-hand", "-o", "json", user="bob")
    copy = json.loads(ok(again))
    assert "resubmit of gate-by-hand (requested by bob)" in again.stderr
    assert copy["spec"] == {"workflowRef": {"name": "gate"}, "params": {"n": 7, "env": "prod"}, "requestedBy": "bob"}

    manifest: dict[str, Any] = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                                "metadata": {"generateName": "gate-"},
                                "spec": {"workflowRef": {"name": "gate"}, "params": {"n": 2}}}
    forged = {**manifest, "spec": {**manifest["spec"], "requestedBy": "alice"}}
    (tmp_path / "forged.yaml").write_text(f"{json.dumps(manifest)}\n---\n{json.dumps(forged)}\n")
    before = runs()
    refused = towline(cluster, ns, "submit", "-f", str(tmp_path / "forged.yaml"))
    assert refused.returncode == 2 and "document 2: spec.requestedBy is 'alice' but you are 'carol'" in refused.stderr
    assert refused.stderr.count("\n") == 1 and runs() == before  # nothing of the file was created
    (tmp_path / "runs.yaml").write_text(f"{json.dumps(manifest)}\n---\n{json.dumps(manifest)}\n")
    submitted = ok(towline(cluster, ns, "submit", "-f", str(tmp_path / "runs.yaml"), "-o", "name")).split()
    assert len(submitted) == 2
    for name in submitted:
        created = get(cluster, "workflowruns.towline.dev", name.removeprefix("workflowrun/"), ns)
        assert created is not None and created["spec"]["requestedBy"] == "carol"

    # The Workflow as carol sees it: Ready, its last run, its next slot; in full with `show`.
    wait_for("gate to be Ready with its next slot", lambda: (get(cluster, "workflows.towline.dev", "gate", ns) or {})
             .get("status", {}).get("nextScheduleTime"), 60)
    table = ok(towline(cluster, ns, "workflows")).splitlines()
    assert table[0].split()[:2] == ["NAME", "READY"] and table[1].split()[:2] == ["gate", "True"], table
    assert " in " in table[1], table
    shown = ok(towline(cluster, ns, "workflows", "show", "gate"))
    assert "  n: integer = 1" in shown and "  manual: kubectl towline run gate (always allowed)" in shown
    assert "  new_year: schedule 0 0 1 1 * (UTC, Allow); next in " in shown, shown
    missing = towline(cluster, ns, "workflows", "show", "nope")
    assert missing.returncode == 1 and "no Workflow 'nope'" in missing.stderr and missing.stderr.count("\n") == 1


def test_logs_tail_since_timestamps_and_container(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    bind_role(cluster, ns, "towline-log-reader", users=("carol",))
    apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "shape", "namespace": ns},
                    "spec": {"steps": [{"id": "shape", "action": "data.transform",
                                        "with": {"data": {}, "fields": {"ok": "true"}}}]}})
    run = created_name(ok(towline(cluster, ns, "run", "shape", "--wait")))
    whole = ok(towline(cluster, ns, "logs", run)).splitlines()
    assert whole[0].startswith("==> step shape attempt 1 ") and len(whole) > 2, whole
    assert ok(towline(cluster, ns, "logs", run, "--tail", "1")).splitlines() == [whole[0], whole[-1]]
    assert ok(towline(cluster, ns, "logs", run, "--since", "1h")).splitlines() == whole
    stamped = ok(towline(cluster, ns, "logs", run, "shape", "--timestamps")).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped[1:]] == whole[1:]
    assert all(line[:4].isdigit() and line.split(" ", 1)[0].endswith("Z") for line in stamped[1:]), stamped
    followed = ok(towline(cluster, ns, "logs", "-f", run, "--tail", "1")).splitlines()
    assert followed == [f"shape: {whole[-1]}"], followed
    prepare = towline(cluster, ns, "logs", run, "-c", "prepare")  # a built-in step's pod has no prepare container
    assert prepare.returncode == 1 and "has no prepare container" in prepare.stderr
    assert "Traceback" not in prepare.stderr
    refused = towline(cluster, ns, "logs", run, "--tail", "1", user="alice")  # no towline-log-reader binding
    assert refused.returncode == 1 and "forbidden: you may not list pods" in refused.stderr
    assert refused.stderr.count("\n") == 1

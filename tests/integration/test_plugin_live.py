"""The live `kubectl towline` commands against the local control plane and real node, as alice, bob and carol:
`logs -f` and `watch` follow a run through watches as it happens; `approvals --mine` shows exactly the gates
the API server's admission then lets each person decide; `approve RUN STEP` decides the run's own gate.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import threading
from typing import Any

import pytest
from tests.integration.pluginsupport import BIN, created_name, ok, towline
from tests.integration.support import (
    ScriptedServer,
    apply,
    bind_role,
    get,
    step_status,
    wait_for,
    wait_for_phase,
)
from tests.integration.workflows import release_workflow

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]


class Follower:
    """`kubectl-towline ARGS` running in the background; its stdout lines as they come."""

    def __init__(self, cluster: ControlPlane, namespace: str, *args: str, user: str = "carol") -> None:
        argv = [str(BIN / "kubectl-towline"), "--kubeconfig", str(cluster.kubeconfig), "--context",
                context_name(user), "-n", namespace, *args]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, what: str, predicate: Any, timeout: float = 120.0) -> str:
        """Read lines until one satisfies `predicate` (the process writes them as it learns of them)."""
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line with {what} within {timeout}s; got {self.lines}") from None
            if line is None:
                raise AssertionError(f"exited before a line with {what}; got {self.lines}; {self.stderr()}")
            self.lines.append(line)
            if predicate(line):
                return line

    def finish(self, timeout: float = 180.0) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        while (line := self._queue.get_nowait() if not self._queue.empty() else None) is not None:
            self.lines.append(line)
        return code

    def stderr(self) -> str:
        return self.process.stderr.read() if self.process.stderr and self.process.poll() is not None else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def interrupted(follower: Follower, what: str, predicate: Any) -> None:
    """Ctrl-C (SIGINT) once the command has printed `what`: one line on stderr, exit 130, no traceback."""
    try:
        follower.wait_for_line(what, predicate)
        follower.process.send_signal(signal.SIGINT)
        assert follower.finish(timeout=60) == 130
        stderr = follower.stderr()
        assert stderr == "interrupted\n", stderr
    finally:
        follower.stop()


def two_steps(namespace: str, api: str) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "two", "namespace": namespace},
        "spec": {"steps": [
            {"id": "first", "action": "http.request", "with": {"url": f"{api}/first", "select": "response.body"}},
            {"id": "second", "needs": ["first"], "action": "http.request", "retry": {"limit": 0},
             "with": {"url": f"{api}/second", "select": "response.body"}},
        ]},
    }


def test_logs_follow_streams_both_steps_in_order_and_watch_exits_with_the_runs_result(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    bind_role(cluster, ns, "towline-log-reader", users=("carol",))
    hold = threading.Event()
    with ScriptedServer() as api:
        api.script("/first", (200, {"n": 1}, {}), hold=hold)
        api.script("/second", (200, {"n": 2}, {}), (400, {"error": "quota"}, {}))
        apply(cluster, two_steps(ns, api.url))
        run = created_name(ok(towline(cluster, ns, "run", "two")))
        logs, watch = Follower(cluster, ns, "logs", "-f", run), Follower(cluster, ns, "watch", run)
        try:
            watch.wait_for_line("the first step running", lambda line: line == f"{run}: Running (first)")
            # The first step's log reaches the follower while that step is still held inside its HTTP call.
            logs.wait_for_line("the first step's log", lambda line: line.startswith("first: ")
                               and "running http.request" in line)
            assert get(cluster, "workflowruns.towline.dev", run, ns)["status"]["currentStep"] == "first"
            assert not any(line.startswith("second: ") for line in logs.lines)
            interrupted(Follower(cluster, ns, "logs", "-f", run), "the first step's log",
                        lambda line: line.startswith("first: "))
            interrupted(Follower(cluster, ns, "watch", run), "the first step running",
                        lambda line: line == f"{run}: Running (first)")
            hold.set()
            assert logs.finish() == 0, logs.stderr()
            assert watch.finish() == 0, watch.stderr()
        finally:
            hold.set()
            logs.stop()
            watch.stop()
        assert get(cluster, "workflowruns.towline.dev", run, ns)["status"]["phase"] == "Succeeded"
        steps = [line.split(":", 1)[0] for line in logs.lines]
        assert set(steps) == {"first", "second"}, logs.lines
        assert steps.index("second") > len(steps) - 1 - steps[::-1].index("first"), "all of first, then second"
        assert any(line.startswith("second: ") and "running http.request" in line for line in logs.lines)
        # Following a run that has already ended reads each finished pod's log whole, in the steps' order.
        again = ok(towline(cluster, ns, "logs", "-f", run)).splitlines()
        assert [line.split(":", 1)[0] for line in again] == steps, again
        # Without -f: every step pod's log so far, each under its step's header.
        whole = ok(towline(cluster, ns, "logs", run))
        headers = [line.split()[2] for line in whole.splitlines() if line.startswith("==> step ")]
        assert headers == ["first", "second"], whole
        assert whole.count("running http.request") >= 2, whole
        changes = [line for line in watch.lines if line not in (f"{run}: Pending", f"{run}: Running")]
        assert changes == [f"{run}: Running (first)", f"{run}: Running (second)", f"{run}: Succeeded"], watch.lines

        # A run that fails: watch prints it and exits 1 (the second call now answers 400, never retried).
        hold.set()
        failing = created_name(ok(towline(cluster, ns, "run", "two")))
        watched = Follower(cluster, ns, "watch", failing)
        try:
            assert watched.finish() == 1
        finally:
            watched.stop()
        message = get(cluster, "workflowruns.towline.dev", failing, ns)["status"]["message"]
        assert message and watched.lines[-2:] == [f"{failing}: Failed", message], watched.lines
        missing = towline(cluster, ns, "watch", "no-such-run")
        assert missing.returncode == 1 and "no WorkflowRun 'no-such-run'" in missing.stderr


def admitted(cluster: ControlPlane, ns: str, approval: str, user: str) -> bool:
    """Whether the API server's admission lets `user` decide `approval` (a server-side dry run: nothing kept)."""
    patch = json.dumps({"spec": {"decision": "Approved", "decidedBy": user}})
    result = cluster.kubectl("patch", "approval", approval, "-n", ns, "--type", "merge", "-p", patch,
                             "--dry-run=server", user=user, check=False)
    assert result.returncode == 0 or "ValidatingAdmissionPolicy" in result.stderr, result.stderr
    return bool(result.returncode == 0)


def test_approvals_mine_agrees_with_admission_and_approve_run_step_decides_the_runs_own_gate(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/status", (200, {"version": "2.0.0"}, {}))
        api.script("/release", (201, {"released": True}, {}))
        apply(cluster, release_workflow(ns, api.url))  # users bob, carol; four eyes
        apply(cluster, release_workflow(ns, api.url, name="team-gate",
                                        approval={"approvers": {"groups": ["team-a"]}, "fourEyes": False}))
        apply(cluster, release_workflow(ns, api.url, name="group-gate",
                                        approval={"approvers": {"groups": ["approvers", "team-a"]}}))
        runs = {
            "release": created_name(ok(towline(cluster, ns, "run", "release", user="carol"))),
            "team-gate": created_name(ok(towline(cluster, ns, "run", "team-gate", user="carol"))),
            "group-gate": created_name(ok(towline(cluster, ns, "run", "group-gate", user="alice"))),
        }
        gates = {}
        for workflow, run in runs.items():
            gates[workflow] = step_status(wait_for_phase(cluster, ns, run, {"AwaitingApproval"}), "review")[
                "approvalName"]
            wait_for("the Approval", lambda name=gates[workflow]: get(cluster, "approvals.towline.dev", name, ns))

        listed = ok(towline(cluster, ns, "approvals", user="alice"))
        assert listed.splitlines()[0].split() == ["NAME", "RUN", "STEP", "APPROVERS", "AGE", "EXPIRES", "MESSAGE"]
        assert all(re.search(rf"^{gates[w]} +{runs[w]} +review ", listed, re.M) for w in runs), listed
        assert "bob,carol (four eyes)" in listed and "Release 2.0.0?" in listed
        as_json = json.loads(ok(towline(cluster, ns, "approvals", "-o", "json", user="alice")))
        assert as_json["kind"] == "List" and {item["kind"] for item in as_json["items"]} == {"Approval"}
        assert {item["metadata"]["name"] for item in as_json["items"]} == set(gates.values())
        assert ok(towline(cluster, ns, "approvals", "--workflow", "team-gate", "-o", "name", user="alice")) \
            == f"approval/{gates['team-gate']}\n"
        wide = ok(towline(cluster, ns, "approvals", "-o", "wide", user="alice"))
        assert wide.splitlines()[0].split()[3:5] == ["WORKFLOW", "REQUESTED"], wide
        assert re.search(rf"^{gates['group-gate']} +{runs['group-gate']} +review +group-gate +alice ", wide, re.M), wide
        everywhere = ok(towline(cluster, ns, "approvals", "-A", user="admin"))
        assert everywhere.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"], everywhere
        assert all(re.search(rf"^{ns} +{gate} +", everywhere, re.M) for gate in gates.values()), everywhere

        expected = {"bob": {"release", "group-gate"}, "carol": {"team-gate", "group-gate"},
                    "alice": {"team-gate"}}
        for user, allowed in expected.items():
            mine = ok(towline(cluster, ns, "approvals", "--mine", user=user))
            shown = {w for w, gate in gates.items() if gate in mine}
            by_admission = {w for w, gate in gates.items() if admitted(cluster, ns, gate, user)}
            assert shown == by_admission == allowed, (user, shown, by_admission, mine)

        release = runs["release"]
        refused = towline(cluster, ns, "approve", release, "review", user="alice")
        assert refused.returncode == 1
        assert "alice is not an allowed approver of this step; ask one of the users or groups in spec.approvers" \
            in refused.stderr
        not_a_gate = towline(cluster, ns, "approve", release, "check", user="bob")
        assert not_a_gate.returncode == 2 and "step check of run" in not_a_gate.stderr \
            and "not an approval (Succeeded)" in not_a_gate.stderr
        assert "approved by bob" in ok(towline(cluster, ns, "approve", release, "review", user="bob"))
        done = wait_for_phase(cluster, ns, release, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded" and step_status(done, "release")["phase"] == "Succeeded"
        again = towline(cluster, ns, "approve", release, "review", user="bob")
        assert again.returncode == 2
        assert f"step review of run {release} has no pending approval: it is Succeeded, approved by bob" \
            in again.stderr
        missing = towline(cluster, ns, "approve", "no-such-run", "review", user="bob")
        assert missing.returncode == 1 and "no WorkflowRun 'no-such-run'" in missing.stderr

        # RUN alone: the run's one pending gate.
        assert "rejected by carol" in ok(towline(cluster, ns, "reject", runs["team-gate"], "--reason", "not now"))
        assert get(cluster, "approvals.towline.dev", gates["team-gate"], ns)["spec"]["decidedBy"] == "carol"
        assert wait_for_phase(cluster, ns, runs["team-gate"], {"Failed", "Succeeded"})["status"]["phase"] == "Failed"

        # RUN STEP rejects that run's gate.
        assert "rejected by bob" in ok(towline(cluster, ns, "reject", runs["group-gate"], "review", user="bob"))
        assert get(cluster, "approvals.towline.dev", gates["group-gate"], ns)["spec"]["decision"] == "Rejected"
        assert wait_for_phase(cluster, ns, runs["group-gate"], {"Failed", "Succeeded"})["status"]["phase"] == "Failed"

"""A remote server's error text reaches `kubectl towline` output without terminal escape sequences.

The attacker runs (or has taken over) a server a step calls: its error body
lands in the step's message, and `kubectl towline describe`, `status` and
`runs` print it on the terminal of whoever looks at the run. The body sets
the window title, clears the screen and carries C1 controls.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.support import ScriptedServer, apply, start_run, step_status, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess
from towline_dev.kubeconfig import context_name

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

BIN = Path(sys.executable).parent
HOSTILE = "upstream says \x1b]0;owned\x07no\x1b[2J\x9b2J\x85 more"


def controls(text: str) -> list[str]:
    return [repr(c) for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_describe_status_and_runs_print_a_servers_error_text_without_controls(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as server:
        server.script("/fail", (400, HOSTILE.encode(), {"Content-Type": "text/plain"}))
        apply(cluster, {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
                        "metadata": {"name": "calls", "namespace": ns},
                        "spec": {"steps": [{"id": "call", "action": "http.request",
                                            "with": {"url": f"{server.url}/fail"}}]}})
        run = start_run(cluster, ns, "calls", "calls-1")
        failed = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    assert failed["status"]["phase"] == "Failed"
    assert "\x1b]0;owned" in step_status(failed, "call")["message"], "the run records the server's text as sent"

    printed = {}
    for command in (["describe", run], ["status", run], ["runs", "-o", "wide"]):
        done = subprocess.run(
            [str(BIN / "kubectl-towline"), "--kubeconfig", str(cluster.kubeconfig), "--context", context_name("carol"),
             "-n", ns, *command], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert controls(done.stdout) == [] and controls(done.stderr) == [], command
        printed[command[0]] = done.stdout
    assert "upstream says no" in printed["describe"], printed["describe"]

"""`make dev`, the README's main command, as a user runs it: its entry point in a subprocess on the real node.

It must bring up the chart's operator and ingress as containers, run the demo to its
approval, print a walkthrough that works as printed (bob approves, the run Succeeds with
every step a container; a signed webhook reaches the Helm-installed ingress from this
machine), and on Ctrl-C stop everything: no process, mount, network namespace, netfilter
chain or test host left, the machine's node lock free.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.integration.dev.devsupport import require_the_machines_node, stop_leaving_nothing
from tests.integration.support import wait_for

from towline_dev.devenv import READY_LINE
from towline_dev.node.leftovers import netns_names

pytestmark = [pytest.mark.integration, pytest.mark.local_only]
START_TIMEOUT = 3000  # it may wait for another node first, and a first start builds the images


@dataclass
class DevSession:
    """A running `towline-dev` and what it printed."""

    process: subprocess.Popen[str]
    home: Path
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def printed(self, pattern: str) -> str:
        found = re.search(pattern, self.output)
        assert found, f"`make dev` did not print {pattern!r}:\n{self.output}"
        return found.group(1)

    def env(self) -> dict[str, str]:
        """The environment its `export` lines set up."""
        path = self.printed(r"export PATH=(\S+):\$PATH")
        return dict(os.environ, KUBECONFIG=self.printed(r"export KUBECONFIG=(\S+)"),
                    PATH=f"{path}:{os.environ.get('PATH', '')}")

    def kubectl(self, *args: str, context: str = "admin") -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", "--context", context, *args], env=self.env(), capture_output=True,
                              text=True, timeout=60, check=False)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        result = self.kubectl("get", kind, name, "-n", namespace, "-o", "json")
        assert result.returncode == 0, result.stderr
        found: dict[str, Any] = json.loads(result.stdout)
        return found


def _read(session: DevSession) -> None:
    assert session.process.stdout is not None
    for line in session.process.stdout:
        session.lines.append(line)
        if READY_LINE in line:
            session.ready.set()
    session.ready.set()


@pytest.fixture
def make_dev(tmp_path: Path) -> Iterator[DevSession]:
    require_the_machines_node()
    home = tmp_path / "home"
    stderr = (tmp_path / "make-dev.stderr").open("w")
    process = subprocess.Popen([sys.executable, "-m", "towline_dev", "--home", str(home)], stdout=subprocess.PIPE,
                               stderr=stderr, text=True)
    session = DevSession(process, home)
    threading.Thread(target=_read, args=(session,), daemon=True).start()
    try:
        yield session
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                process.kill()
        stderr.close()


# It may first wait for another node on the machine (the node lock), as `make dev` itself does.
@pytest.mark.timeout(START_TIMEOUT + 1800)
def test_make_dev_runs_the_demo_on_the_real_node_and_ctrl_c_leaves_nothing(make_dev: DevSession) -> None:
    session = make_dev
    session.ready.wait(timeout=START_TIMEOUT)
    stderr = (session.home.parent / "make-dev.stderr").read_text()
    assert READY_LINE in session.output, f"make dev did not come up:\n{session.output}\n{stderr[-6000:]}"
    assert "helm install towline" in session.output and "--set-string image.repository=localhost/towline" in (
        session.output)
    run = session.printed(r"The demo\s+run (\S+) \(started by carol\)")
    approval = session.printed(r"--context bob -n towline-demo patch approval (\S+) ")

    # The chart's Deployments run as containers on the node.
    pods = json.loads(session.kubectl("get", "pods", "-n", "towline-system", "-o", "json").stdout)["items"]
    components = {p["metadata"]["labels"].get("app.kubernetes.io/component") for p in pods
                  if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")}
    assert {"operator", "ingress"} <= components, [p["metadata"]["name"] for p in pods]

    # The walkthrough as printed: alice and carol are refused, bob approves, the run Succeeds.
    patch = ["patch", "approval", approval, "-n", "towline-demo", "--type", "merge", "-p"]
    refused = session.kubectl(*patch, '{"spec":{"decision":"Approved","decidedBy":"alice"}}', context="alice")
    assert refused.returncode != 0 and "not an allowed approver" in refused.stderr, refused
    own = session.kubectl(*patch, '{"spec":{"decision":"Approved","decidedBy":"carol"}}', context="carol")
    assert own.returncode != 0 and "four-eyes" in own.stderr, own
    approved = session.kubectl(*patch, '{"spec":{"decision":"Approved","decidedBy":"bob"}}', context="bob")
    assert approved.returncode == 0, approved.stderr

    def finished() -> dict[str, Any] | None:
        found = session.get("workflowrun", run, "towline-demo")
        return found if (found.get("status") or {}).get("phase") in {"Succeeded", "Failed"} else None

    done = wait_for("the demo run to finish", finished, timeout=300)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    steps = {s["id"]: s for s in done["status"]["steps"]}
    # deploy's output is the demo API's answer: the step container reached it in the test-host namespace.
    assert steps["deploy"]["output"]["body"]["deployed"] == "2.4.1", steps["deploy"]
    step_pods = json.loads(session.kubectl("get", "pods", "-n", "towline-demo", "-l", f"towline.dev/run={run}",
                                           "-o", "json").stdout)["items"]
    assert len(step_pods) == 3, [p["metadata"]["name"] for p in step_pods]
    for pod in step_pods:
        (state,) = pod["status"]["containerStatuses"]
        assert pod["spec"]["nodeName"] and state["containerID"], pod["status"]
        assert state["state"]["terminated"]["exitCode"] == 0, state

    # The printed webhook command reaches the Helm-installed ingress from this machine and starts a run.
    command = session.printed(r"(?s)\n  (\S+ webhook send .*?--data '\{\"service\": \"checkout\"\}')").replace(
        "\\\n", " ")
    sent = subprocess.run(shlex.split(command), env=session.env(), capture_output=True, text=True, timeout=60,
                          check=False)
    assert sent.stdout.startswith("202 "), sent.stdout + sent.stderr
    webhook_run = json.loads(sent.stdout.split(" ", 1)[1])["run"]
    assert session.get("workflowrun", webhook_run, "towline-demo")["spec"]["trigger"]["type"] == "webhook"

    # `towline-dev cluster env` prints the same export lines for the running environment.
    exports = subprocess.run([sys.executable, "-m", "towline_dev", "cluster", "--home", str(session.home), "env"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert f"export KUBECONFIG={session.env()['KUBECONFIG']}" in exports.stdout, exports

    # Ctrl-C: everything stops and nothing is left.
    state_dir = Path(json.loads((session.home / "cluster.json").read_text())["stateDir"])
    pod_netns = set(netns_names(state_dir))
    assert pod_netns, "the node's pods have network namespaces while it runs"

    def interrupt() -> None:
        session.process.send_signal(signal.SIGINT)
        assert session.process.wait(timeout=300) == 0, (
            (session.home.parent / "make-dev.stderr").read_text()[-4000:])

    stop_leaving_nothing(interrupt, state_dir, pod_netns)
    assert not state_dir.exists() and not (session.home / "cluster.json").exists()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            assert b"towline_dev.demoapi" not in argv and str(state_dir).encode() not in argv, argv


@pytest.mark.parametrize("command", [[], ["cluster", "up"]], ids=["make-dev", "cluster-up"])
def test_make_dev_without_root_says_so_and_starts_nothing(tmp_path: Path, command: list[str]) -> None:
    """As root, the command runs in a fresh user namespace with no uid mapping: there it is uid 65534 and holds
    no capability over the machine, yet it can still read the checkout and the Python it was installed into.
    Dropping to another uid instead (setpriv) breaks where those live in root's 0700 home, as on CI
    (`No module named towline_dev`).
    """
    home = tmp_path / "home"
    argv = [sys.executable, "-m", "towline_dev", *command[:1], "--home", str(home), *command[1:]]
    if os.geteuid() == 0:
        argv = ["unshare", "--user", *argv]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result
    assert "needs root" in result.stderr and "nothing was started" in result.stderr, result.stderr
    assert not home.exists()

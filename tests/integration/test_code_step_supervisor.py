"""A code.python step against the runner that supervises it, on the real node.

The runner is the container's first process and runs as the same user as the code, so without more the code could
`ptrace` it (stop it: the time limit is then never enforced, and nothing reports but the Job's deadline), read its
memory and environment, or write the container's stdout past the redactor. The runner makes itself non-dumpable
before any code starts: the code, as its author would, tries each, and the step's timeoutSeconds still holds.
The session's operator has code steps on in these tests' namespaces (named test_code_*).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.support import apply, ready, start_run, step_status, wait_for_phase, workflow

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration]

REACH = """\
import ctypes, errno, os, time

def attempt(call):
    try:
        call()
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    return "allowed"

def main(inputs):
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    found = {"parent": parent}
    if libc.ptrace(16, parent, None, None) == 0:  # PTRACE_ATTACH
        found["attach"] = "allowed"
        if not inputs.get("linger"):
            libc.ptrace(17, parent, None, None)  # PTRACE_DETACH, so the runner still writes this result
    else:
        found["attach"] = errno.errorcode.get(ctypes.get_errno(), "?")
    found["mem"] = attempt(lambda: open("/proc/1/mem", "rb").close())
    found["environ"] = attempt(lambda: open("/proc/1/environ", "rb").read())
    found["stdout"] = attempt(lambda: open("/proc/1/fd/1", "wb").close())
    if inputs.get("linger"):
        while True:  # runs on without taking the CPU its runner needs, on a busy node, to stop it and report
            time.sleep(0.5)
    return found
"""
REFUSED = {"EPERM", "EACCES"}


def code_step(step_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "action": "code.python", "onFailure": "continue", "with": {"source": REACH, **extra}}


def test_code_python_cannot_trace_its_runner_or_read_or_write_through_it(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, workflow(ns, "supervisor", [
        code_step("reach"),
        # Tries to attach, then runs on: the runner must still stop it at its time limit and say so.
        {**code_step("linger", inputs={"linger": True}), "timeoutSeconds": 30},
    ]))
    assert ready(cluster, "workflows.towline.dev", "supervisor", ns)["status"] == "True"
    done = wait_for_phase(cluster, ns, start_run(cluster, ns, "supervisor"), {"Succeeded", "Failed"}, timeout=240)
    reach = step_status(done, "reach")
    assert reach["phase"] == "Succeeded", reach
    found = reach["output"]
    assert found["parent"] == 1, found  # the runner is the container's first process
    assert found["attach"] == "EPERM", found
    assert {found["mem"], found["environ"], found["stdout"]} <= REFUSED, found
    linger = step_status(done, "linger")
    assert linger["phase"] == "Failed" and linger["errorClass"] == "timeout", linger
    # The runner stops it either at the step's timeout or, when the pod started late on a busy node, at the end of
    # the budget the Job's creation set: each is the time limit holding against a runner the code tried to stop.
    assert ("ran past the step's time limit" in linger["message"]
            or "hit the step deadline" in linger["message"]), linger

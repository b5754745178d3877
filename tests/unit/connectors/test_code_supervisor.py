"""The runner beside a code step's code: non-dumpable before the code starts (so the code, running as the same
user, cannot trace it or open its /proc memory, environment or stdout), and an action name read exactly as
written (policy towline-step-objects admits a code action by that same value). tests/integration/
test_code_step_supervisor.py tries each from inside a real code step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from towline_connectors.errors import ActionError
from towline_connectors.registry import ACTIONS
from towline_connectors.runner import read_config

# In a process of its own: run_sandboxed leaves the process that calls it non-dumpable.
CHECK = """\
import ctypes, json
from towline_connectors.codesandbox import PR_GET_DUMPABLE, SandboxLimits, run_sandboxed
libc = ctypes.CDLL(None)
before = libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)
outcome = run_sandboxed({"kind": "python", "inputs": {}, "source": "def main(inputs):\\n    return 7\\n"}, b"",
                        SandboxLimits(wall_seconds=30, max_processes=4096), lambda line: None)
print(json.dumps([before, libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), outcome.document]))
"""


def test_the_runner_is_not_dumpable_once_it_has_started_code() -> None:
    ran = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    before, after, document = json.loads(ran.stdout.strip().splitlines()[-1])
    assert (before, after) == (1, 0)
    assert document == {"ok": True, "output": 7}, "the code still runs"


@pytest.mark.parametrize("name", [" code.python", "code.python ", "\x1ccode.python", "code.python\n"])
def test_an_action_name_with_spaces_around_it_is_refused_naming_the_variable(name: str) -> None:
    with pytest.raises(ActionError, match=r"TOWLINE_ACTION .* has spaces around the action's name"):
        read_config({"TOWLINE_ACTION": name, "TOWLINE_INPUT": "{}"}, ACTIONS)

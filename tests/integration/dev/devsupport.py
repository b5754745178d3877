"""What the dev-environment tests share: stopping a dev node and proving it left nothing on the machine."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from towline_dev.node.leftovers import leftovers
from towline_dev.node.network import run as run_command
from towline_dev.node.probehosts import NAMESPACE as TEST_HOSTS_NETNS
from towline_dev.node.realnode import NODE_LOCK

_HOLD_NODE_LOCK = (
    "import fcntl, sys, time\n"
    "lock = open(sys.argv[1], 'a')\n"
    "fcntl.flock(lock, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "time.sleep(600)\n"
)


def require_the_machines_node() -> None:
    """Skip without root; fail when this session's own node already holds the machine (it would wait forever)."""
    from tests import conftest  # noqa: PLC0415 - the session's node, if this process started one

    if os.geteuid() != 0:
        pytest.skip("a dev cluster runs a real node, which needs root")
    if conftest._NODE_CLUSTER is not None:
        pytest.fail("the session's real node holds the machine's node lock: run tests/integration/dev first "
                    "(its conftest orders it so) or on its own")


def stop_leaving_nothing(stop: Callable[[], None], state_dir: Path, pod_netns: set[str]) -> None:
    """Call `stop`, then assert the node left nothing: no process, mount, network namespace, netfilter chain,
    bridge or test host.

    It queues for the machine's node lock before stopping, so that (unless another waiting node wins it)
    nothing can start between the stop and the check of the machine-wide state (chains, bridges, namespaces).
    """
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_NODE_LOCK, str(NODE_LOCK)], stdout=subprocess.PIPE,
                              text=True)
    try:
        stop()
        assert holder.stdout is not None
        held = bool(select.select([holder.stdout], [], [], 30)[0]) and holder.stdout.readline().strip() == "held"
        left = leftovers(state_dir, pod_netns)
        if held:
            assert left == []
            assert TEST_HOSTS_NETNS not in run_command(["ip", "netns", "list"]).stdout
        else:
            # Another engineer's node took the machine first (its start clears the machine-wide state):
            # what is this node's own must still be gone.
            print("dev test: another node took the machine's lock first; checked this node's own leftovers")
            assert [item for item in left if item.startswith(("netns:", "mount:", "process"))] == []
    finally:
        holder.kill()
        holder.wait()

"""Two tests running at once may count SYNs to the same test host (the metadata address): each `ProbeHosts`
counts only its own, and stopping one leaves the other's count alone. Run in a world of its own
(towline_dev.node.world), so the session's test-hosts namespace is not touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from towline_dev.node import world

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the test-hosts namespace and a world need root"),
]

SCRIPT = """
import json, socket, sys, tempfile
from pathlib import Path
from towline_dev.node.probehosts import METADATA_ADDRESS, ProbeHosts

endpoint = f"{METADATA_ADDRESS}:80"

def knock():
    try:
        socket.create_connection((METADATA_ADDRESS, 80), timeout=5).close()
    except ConnectionRefusedError:
        pass  # nothing listens there: the SYN arrived and was answered with a reset

logs = Path(tempfile.mkdtemp())
first = ProbeHosts([endpoint], logs).start()
knock(); knock()
second = ProbeHosts([endpoint], logs).start()
knock()
counts = {"first": first.arrived(endpoint), "second": second.arrived(endpoint)}
second.stop()
knock()
counts["first after the second stopped"] = first.arrived(endpoint)
first.stop()
json.dump(counts, sys.stdout)
"""


def test_two_probes_of_one_address_count_their_own_syns() -> None:
    done = subprocess.run(world.command([sys.executable, "-c", SCRIPT]), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"first": 3, "second": 1, "first after the second stopped": 4}

"""`towline-dev cluster up|env|down` as a user runs them: `up` in the foreground brings up the control plane and a
real node with both images, a second `up` over the same home refuses and points at the first, `env` prints
export lines that reach it, `down` stops it from another shell and nothing is left on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.integration.dev.devsupport import require_the_machines_node, stop_leaving_nothing

from towline_dev.images import RUNNER_IMAGE, TOWLINE_IMAGE
from towline_dev.node.leftovers import netns_names

pytestmark = [pytest.mark.integration, pytest.mark.local_only]
START_TIMEOUT = 3000  # it may wait for another node first, and a first start builds the images
BANNER = "Towline dev cluster is up"


def towline_dev(home: Path, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "towline_dev", "cluster", "--home", str(home), command],
                          capture_output=True, text=True, timeout=180, check=False)


def exported(lines: str) -> dict[str, str]:
    """The environment `eval "$(towline-dev cluster env)"` gives."""
    env = dict(os.environ)
    for line in lines.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.replace("$PATH", os.environ.get("PATH", ""))
    return env


@pytest.mark.timeout(START_TIMEOUT + 600)
def test_cluster_up_env_down_leave_nothing(tmp_path: Path) -> None:
    require_the_machines_node()
    home = tmp_path / "home"
    stderr_path = tmp_path / "up.stderr"
    with stderr_path.open("w") as stderr:
        up = subprocess.Popen([sys.executable, "-m", "towline_dev", "cluster", "--home", str(home), "up"],
                              stdout=subprocess.PIPE, stderr=stderr, text=True)
    printed: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert up.stdout is not None
        for line in up.stdout:
            printed.append(line)
            if BANNER in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        ready.wait(timeout=START_TIMEOUT)
        assert any(BANNER in line for line in printed), "".join(printed) + stderr_path.read_text()[-6000:]

        again = towline_dev(home, "up")
        assert again.returncode == 1 and f"already running (pid {up.pid})" in again.stderr, again

        env = towline_dev(home, "env")
        assert env.returncode == 0, env
        nodes = subprocess.run(["kubectl", "--context", "admin", "get", "nodes", "-o", "json"],
                               env=exported(env.stdout), capture_output=True, text=True, timeout=60, check=True)
        (node,) = json.loads(nodes.stdout)["items"]
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True", conditions
        images = {name for image in node["status"].get("images", []) for name in image.get("names", [])}
        assert {TOWLINE_IMAGE, RUNNER_IMAGE} <= images, images

        state_dir = Path(json.loads((home / "cluster.json").read_text())["stateDir"])
        pod_netns = set(netns_names(state_dir))
        assert pod_netns, "the node's pods (CoreDNS) have network namespaces while it runs"

        def down() -> None:
            stopped = towline_dev(home, "down")
            assert stopped.returncode == 0 and f"stopped the dev cluster (pid {up.pid})" in stopped.stderr, stopped
            assert up.wait(timeout=60) == 128 + 15, stderr_path.read_text()[-4000:]  # it ended on SIGTERM

        stop_leaving_nothing(down, state_dir, pod_netns)
        assert not state_dir.exists() and not (home / "cluster.json").exists()
        gone = towline_dev(home, "env")
        assert gone.returncode == 1 and "no dev cluster is running" in gone.stderr, gone
    finally:
        if up.poll() is None:
            up.terminate()
            up.wait(timeout=300)

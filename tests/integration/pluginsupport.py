"""Running `kubectl towline` as a person in the plugin's tests: the installed console script, that person's context."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from towline_dev.controlplane import ControlPlane
from towline_dev.kubeconfig import context_name

BIN = Path(sys.executable).parent


def towline(cluster: ControlPlane, namespace: str, *args: str, user: str = "carol") -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "kubectl-towline"), "--kubeconfig", str(cluster.kubeconfig), "--context", context_name(user),
            "-n", namespace, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stdout}\n{result.stderr}"
    return result.stdout


def created_name(output: str) -> str:
    return output.split(maxsplit=1)[0].removeprefix("workflowrun/")

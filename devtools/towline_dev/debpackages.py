"""Make sure pinned Debian packages are installed, installing them when run as root.

A fresh CI machine (Debian, root) gets what it lacks with apt-get at the pinned
version; anywhere else the error names the exact command to run. A package
already installed at another version is used as it is: replacing a
machine-wide tool (a downgrade, say) is the administrator's call, not a
build's, so that only earns a note.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping

Progress = Callable[[str], None]


class PackagesUnavailable(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """Required packages are missing and cannot be installed here; the message says how."""


def installed_version(package: str) -> str | None:
    """The installed version of a Debian package, or None."""
    if shutil.which("dpkg-query") is None:
        return None
    result = subprocess.run(
        ["dpkg-query", "--show", "--showformat", "${db:Status-Status} ${Version}", package],
        capture_output=True, text=True, check=False,
    )
    status, _, version = result.stdout.partition(" ")
    return version if result.returncode == 0 and status == "installed" else None


def install_command(pins: Mapping[str, str]) -> list[str]:
    """The apt-get command line installing exactly the pinned versions."""
    return [
        "apt-get", "install", "--yes", "--no-install-recommends",
        # Other builds may hold the dpkg lock for a while; wait rather than fail.
        "-o", "DPkg::Lock::Timeout=600",
        *(f"{name}={version}" for name, version in sorted(pins.items())),
    ]


def ensure_debian_packages(pins: Mapping[str, str], progress: Progress, *, purpose: str) -> None:
    """Install each missing package at its pinned version, or explain how to."""
    missing = {}
    for name, version in sorted(pins.items()):
        found = installed_version(name)
        if found is None:
            missing[name] = version
        elif found != version:
            progress(f"{name} {found} is installed (pinned: {version}); using it")
    if not missing:
        return
    command = install_command(missing)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PackagesUnavailable(
            f"{purpose} needs the Debian packages {', '.join(sorted(missing))}. "
            f"Install them (as root): apt-get update && {' '.join(command)}"
        )
    progress(f"{purpose}: installing {', '.join(f'{n} {v}' for n, v in sorted(missing.items()))} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _apt(["apt-get", "update", "-o", "DPkg::Lock::Timeout=600"], env)
    _apt(command, env)


def _apt(command: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise PackagesUnavailable(
            f"`{' '.join(command)}` failed (exit {result.returncode}). If a pinned version is no longer "
            "offered by the mirror (`apt-cache policy <package>` shows the candidate), update the pin in "
            f"devtools/towline_dev/versions.py.\n{tail}"
        )

"""Install the Debian packages the node runs (containerd, runc, CNI plugins, netfilter tools).

Only as root, only the versions pinned in `towline_dev.versions`, and only when a
package is missing or at another version: a machine that has them is left alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from towline_dev.versions import DEBIAN_PACKAGES


class NodeUnavailable(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """The node cannot run on this machine; the message says what is missing and how to fix it."""


def installed_versions(names: list[str]) -> dict[str, str]:
    """Installed version of each package that is installed (dpkg's view)."""
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\\n", *names],
        capture_output=True, text=True, check=False,
    )
    versions = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "installed":
            versions[parts[0]] = parts[1]
    return versions


def packages_to_install() -> dict[str, str]:
    """The pinned packages that are missing or at another version."""
    installed = installed_versions(list(DEBIAN_PACKAGES))
    return {name: version for name, version in DEBIAN_PACKAGES.items() if installed.get(name) != version}


def ensure_packages(progress: Callable[[str], None]) -> None:
    """apt-get install the pinned packages that are not installed yet (waits for a busy dpkg)."""
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        raise NodeUnavailable("the local node needs a Debian-based machine (apt-get, dpkg-query)")
    wanted = packages_to_install()
    if not wanted:
        return
    if os.geteuid() != 0:
        raise NodeUnavailable(
            "the local node needs root, and these packages: "
            + " ".join(f"{name}={version}" for name, version in wanted.items())
        )
    progress("installing Debian packages: " + ", ".join(f"{n}={v}" for n, v in wanted.items()))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock_wait = ["-o", "DPkg::Lock::Timeout=900"]
    for argv in (
        ["apt-get", *lock_wait, "update", "-q"],
        ["apt-get", *lock_wait, "install", "-y", "-q", "--no-install-recommends",
         *(f"{name}={version}" for name, version in wanted.items())],
    ):
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise NodeUnavailable(f"{' '.join(argv[:4])} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    # Debian starts the packaged containerd service where there is an init system; the node
    # runs its own containerd and never uses the system one.
    still = packages_to_install()
    if still:
        raise NodeUnavailable(f"after apt-get install, still not at the pinned version: {still}")

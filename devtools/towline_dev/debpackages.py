"""Make sure pinned Debian packages are installed, installing them when run as root; check the mirror.

A fresh CI machine (Debian, root) gets what it lacks with apt-get at the pinned
version, or, where the mirror no longer offers that build (Debian's archives keep
only the newest), at the newest offered version the pin accepts
(`towline_dev.debversions`), saying which it took. Anywhere else the error names
the exact command to run. A package already installed at another version is used
as it is: replacing a machine-wide tool (a downgrade, say) is the administrator's
call, not a build's, so that only earns a note.

`python -m towline_dev.debpackages --check` (part of `make test`) asks the mirror,
for every pin in `versions.ALL_DEBIAN_PINS`, whether it still offers a version the
pin accepts: a pin nothing satisfies fails it at once, naming the package and what
is offered, instead of a fresh machine failing half an hour into the suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from towline_dev.debversions import DebianPin, choose_version

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


def offered_versions(package: str) -> list[str]:
    """Every version of `package` the configured mirrors offer now (apt's lists; `apt-get update` first)."""
    if shutil.which("apt-cache") is None:
        return []
    result = subprocess.run(["apt-cache", "madison", package], capture_output=True, text=True, check=False)
    return parse_madison(result.stdout, package)


def parse_madison(text: str, package: str) -> list[str]:
    """The versions in `apt-cache madison` lines (`name | version | source`) of `package`, de-duplicated."""
    versions: list[str] = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) >= 3 and fields[0] == package and fields[1] not in versions:
            versions.append(fields[1])
    return versions


def install_command(versions: Mapping[str, str]) -> list[str]:
    """The apt-get command line installing exactly these versions."""
    return [
        "apt-get", "install", "--yes", "--no-install-recommends",
        # Other builds may hold the dpkg lock for a while; wait rather than fail.
        "-o", "DPkg::Lock::Timeout=600",
        *(f"{name}={version}" for name, version in sorted(versions.items())),
    ]


def resolve_versions(
    pins: Mapping[str, DebianPin], offered: Callable[[str], list[str]], progress: Progress,
) -> dict[str, str]:
    """The version to install of each pinned package: the pin, or the newest offered one it accepts.

    Raises PackagesUnavailable naming every package the mirror offers nothing acceptable of."""
    chosen: dict[str, str] = {}
    unmet: list[str] = []
    for name, pin in sorted(pins.items()):
        versions = offered(name)
        version = choose_version(pin, versions)
        if version is None:
            unmet.append(unmet_line(name, pin, versions))
            continue
        if version != pin.version:
            progress(f"{name} {pin.version} is no longer offered by the mirror; taking {version}, the newest "
                     f"version the pin accepts (update it in devtools/towline_dev/versions.py)")
        chosen[name] = version
    if unmet:
        raise PackagesUnavailable("the mirror offers no version these pins accept:\n" + "\n".join(unmet) +
                                  "\nChoose a version it offers and update devtools/towline_dev/versions.py.")
    return chosen


def unmet_line(name: str, pin: DebianPin, offered: Sequence[str]) -> str:
    """`  containerd: pinned ...; offered: ...` for an error message."""
    what = ", ".join(offered) if offered else "nothing (is its suite in apt's sources, and `apt-get update` run?)"
    return f"  {name}: pinned {pin.describe()}; the mirror offers {what}"


def ensure_debian_packages(pins: Mapping[str, DebianPin], progress: Progress, *, purpose: str) -> None:
    """Install each missing package at its pin (or the newest offered version the pin accepts), or explain how."""
    missing: dict[str, DebianPin] = {}
    for name, pin in sorted(pins.items()):
        found = installed_version(name)
        if found is None:
            missing[name] = pin
        elif found != pin.version:
            progress(f"{name} {found} is installed (pinned: {pin.describe()}); using it")
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        command = install_command({name: pin.version for name, pin in missing.items()})
        raise PackagesUnavailable(
            f"{purpose} needs the Debian packages {', '.join(sorted(missing))}. "
            f"Install them (as root): apt-get update && {' '.join(command)} "
            "(or, where the mirror no longer offers a pinned build, the version `apt-cache policy <package>` offers)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _apt(["apt-get", "update", "-o", "DPkg::Lock::Timeout=600"], env)
    versions = resolve_versions(missing, offered_versions, progress)
    progress(f"{purpose}: installing {', '.join(f'{n} {v}' for n, v in sorted(versions.items()))} with apt-get")
    _apt(install_command(versions), env)


def _apt(command: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise PackagesUnavailable(
            f"`{' '.join(command)}` failed (exit {result.returncode}). If a pinned version is no longer "
            "offered by the mirror (`apt-cache policy <package>` shows the candidate), update the pin in "
            f"devtools/towline_dev/versions.py.\n{tail}"
        )


def check_pins(
    groups: Mapping[str, Mapping[str, DebianPin]], offered: Callable[[str], list[str]], say: Progress,
) -> bool:
    """Whether the mirror offers, for every pin of every group, a version the pin accepts; says what it found."""
    ok = True
    for purpose, pins in groups.items():
        try:
            resolve_versions(pins, offered, say)
        except PackagesUnavailable as error:
            ok = False
            say(f"{purpose}: {error}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m towline_dev.debpackages",
                                     description="Check that the mirror still offers what every Debian pin accepts.")
    parser.add_argument("--check", action="store_true", required=True,
                        help="ask the mirror (after `apt-get update`, as root) about every pin in versions.py")
    parser.parse_args(argv)
    from towline_dev.versions import ALL_DEBIAN_PINS  # noqa: PLC0415 - versions imports this package's pin type

    def say(message: str) -> None:
        print(f"[debian pins] {message}", flush=True)

    if shutil.which("apt-cache") is None:
        say("no apt here (not Debian): nothing to check")
        return 0
    if os.geteuid() == 0:
        _apt(["apt-get", "update", "-qq", "-o", "DPkg::Lock::Timeout=600"],
             {**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    else:
        say("not root: checking against apt's lists as they are (run `apt-get update` for today's)")
    if not check_pins(ALL_DEBIAN_PINS, offered_versions, say):
        return 1
    count = sum(len(pins) for pins in ALL_DEBIAN_PINS.values())
    say(f"the mirror offers a version every one of the {count} pins accepts")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Pinned Debian packages: installed at the pin or the newest offered version it accepts, or a message that says how;
the mirror check that fails on a pin nothing offered satisfies."""

from __future__ import annotations

import os
import shutil

import pytest

from towline_dev import versions
from towline_dev.debpackages import (
    PackagesUnavailable,
    check_pins,
    ensure_debian_packages,
    install_command,
    installed_version,
    parse_madison,
    resolve_versions,
)
from towline_dev.debversions import DebianPin
from towline_dev.versions import ALL_DEBIAN_PINS

MADISON = """\
  chromium | 156.0.8078.129-1~deb12u1 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
  chromium | 150.0.7871.100-1~deb12u1 | http://deb.debian.org/debian bookworm/main amd64 Packages
containerd | 1.6.20~ds1-1+deb12u3 | http://deb.debian.org/debian bookworm/main amd64 Packages
containerd | 1.6.20~ds1-1+deb12u2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
"""


def offered(package: str) -> list[str]:
    return parse_madison(MADISON, package)


def test_madison_lines_give_each_offered_version_of_the_package_once() -> None:
    assert offered("chromium") == ["156.0.8078.129-1~deb12u1", "150.0.7871.100-1~deb12u1"]
    assert offered("containerd") == ["1.6.20~ds1-1+deb12u3", "1.6.20~ds1-1+deb12u2"]
    assert offered("runc") == []


def test_the_install_command_pins_every_version_and_waits_for_the_dpkg_lock() -> None:
    command = install_command({"mmdebstrap": "1.3.5-7", "buildah": "1.28.2+ds1-3+deb12u1+b3"})
    assert command[:2] == ["apt-get", "install"]
    assert command[-2:] == ["buildah=1.28.2+ds1-3+deb12u1+b3", "mmdebstrap=1.3.5-7"]
    assert "--no-install-recommends" in command
    assert "DPkg::Lock::Timeout=600" in command


def test_a_pin_the_mirror_still_offers_is_taken_as_it_is_without_a_word() -> None:
    notes: list[str] = []
    chosen = resolve_versions({"containerd": DebianPin("1.6.20~ds1-1+deb12u3")}, offered, notes.append)
    assert chosen == {"containerd": "1.6.20~ds1-1+deb12u3"}
    assert notes == []


def test_a_browser_pin_whose_build_the_security_archive_replaced_takes_the_offered_one_and_says_so() -> None:
    """The fresh machine of 2026-12-06: 156.0.8078.114 gone, 156.0.8078.129 offered."""
    notes: list[str] = []
    chosen = resolve_versions({"chromium": DebianPin("156.0.8078.114-1~deb12u1", accepts="newer")}, offered,
                              notes.append)
    assert chosen == {"chromium": "156.0.8078.129-1~deb12u1"}
    assert notes == ["chromium 156.0.8078.114-1~deb12u1 is no longer offered by the mirror; taking "
                     "156.0.8078.129-1~deb12u1, the newest version the pin accepts (update it in "
                     "devtools/towline_dev/versions.py)"]


def test_a_pin_nothing_offered_satisfies_fails_naming_the_package_and_what_is_offered() -> None:
    stale = {"containerd": DebianPin("1.6.19~ds1-1+deb12u1"), "chromium": DebianPin("157.0.1-1", accepts="newer")}
    with pytest.raises(PackagesUnavailable) as raised:
        resolve_versions(stale, offered, lambda _: None)
    message = str(raised.value)
    assert ("containerd: pinned 1.6.19~ds1-1+deb12u1 (or a later Debian revision); the mirror offers "
            "1.6.20~ds1-1+deb12u3, 1.6.20~ds1-1+deb12u2") in message
    assert "chromium: pinned 157.0.1-1 (or any newer version); the mirror offers 156.0.8078.129-1~deb12u1" in message


def test_the_check_reports_every_group_with_an_unmet_pin_and_passes_the_others() -> None:
    said: list[str] = []
    groups = {"the local node": {"containerd": DebianPin("1.6.19~ds1-1")},
              "the web view's browser tests": {"chromium": DebianPin("150.0.7871.100-1~deb12u1", accepts="newer")}}
    assert not check_pins(groups, offered, said.append)
    assert [line.split(":")[0] for line in said if "no version" in line] == ["the local node"]
    assert check_pins({"ok": {"containerd": DebianPin("1.6.20~ds1-1+deb12u2")}}, offered, said.append)


def test_every_pin_in_versions_is_in_a_checked_group() -> None:
    """A new group of pins that is not added to ALL_DEBIAN_PINS would escape the mirror check."""
    checked = {item for pins in ALL_DEBIAN_PINS.values() for item in pins.items()}
    groups = {name: value for name, value in vars(versions).items()
              if isinstance(value, dict) and value and all(isinstance(pin, DebianPin) for pin in value.values())}
    assert "BROWSER_TEST_PACKAGES" in groups
    assert {name for name, pins in groups.items() if not set(pins.items()) <= checked} == set()


def test_a_package_that_is_not_installed_has_no_version() -> None:
    assert installed_version("towline-no-such-package") is None


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (Debian)")
def test_installed_packages_at_another_version_are_used_with_a_note() -> None:
    version = installed_version("dpkg")
    assert version is not None
    notes: list[str] = []
    ensure_debian_packages({"dpkg": DebianPin(version)}, notes.append, purpose="x")
    assert notes == []
    ensure_debian_packages({"dpkg": DebianPin("0.0-pinned")}, notes.append, purpose="x")
    assert notes == [f"dpkg {version} is installed (pinned: 0.0-pinned (or a later Debian revision)); using it"]


def test_without_root_the_error_names_the_command_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(PackagesUnavailable) as raised:
        ensure_debian_packages({"towline-no-such-package": DebianPin("1.0")}, lambda _: None,
                               purpose="building the images")
    message = str(raised.value)
    assert "building the images needs the Debian packages towline-no-such-package" in message
    assert "apt-get install --yes --no-install-recommends" in message
    assert "towline-no-such-package=1.0" in message

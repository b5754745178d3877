"""Pinned Debian packages: installed at the pin, or a message that says how."""

from __future__ import annotations

import shutil

import pytest

from towline_dev import debpackages
from towline_dev.debpackages import PackagesUnavailable, ensure_debian_packages, install_command, installed_version


def test_the_install_command_pins_every_version_and_waits_for_the_dpkg_lock() -> None:
    command = install_command({"mmdebstrap": "1.3.5-7", "buildah": "1.28.2+ds1-3+deb12u1+b3"})
    assert command[:2] == ["apt-get", "install"]
    assert command[-2:] == ["buildah=1.28.2+ds1-3+deb12u1+b3", "mmdebstrap=1.3.5-7"]
    assert "--no-install-recommends" in command
    assert "DPkg::Lock::Timeout=600" in command


def test_a_package_that_is_not_installed_has_no_version() -> None:
    assert installed_version("towline-no-such-package") is None


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (Debian)")
def test_installed_packages_at_another_version_are_used_with_a_note() -> None:
    version = installed_version("dpkg")
    assert version is not None
    notes: list[str] = []
    ensure_debian_packages({"dpkg": version}, notes.append, purpose="x")
    assert notes == []
    ensure_debian_packages({"dpkg": "0.0-pinned"}, notes.append, purpose="x")
    assert notes == [f"dpkg {version} is installed (pinned: 0.0-pinned); using it"]


def test_without_root_the_error_names_the_command_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debpackages.os, "geteuid", lambda: 1000)
    with pytest.raises(PackagesUnavailable) as raised:
        ensure_debian_packages({"towline-no-such-package": "1.0"}, lambda _: None, purpose="building the images")
    message = str(raised.value)
    assert "building the images needs the Debian packages towline-no-such-package" in message
    assert "apt-get install --yes --no-install-recommends" in message
    assert "towline-no-such-package=1.0" in message

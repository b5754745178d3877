"""Debian version order (as dpkg's) and what a pin accepts in place of a build the archive replaced."""

from __future__ import annotations

import itertools
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from towline_dev.debversions import DebianPin, choose_version, compare_versions, split_version

ORDERED = [
    "1.0~rc1-1", "1.0-1", "1.0-1+b1", "1.0-1+deb12u1", "1.0-1+deb12u1+b1", "1.0-1+deb12u2", "1.0-2",
    "1.0+ds1-1", "1.0.1-1", "1.6.20~ds1-1+deb12u2", "1.6.20~ds1-1+deb12u3", "1.6.20-1", "1:0.1-1",
]


def sign(value: int) -> int:
    return (value > 0) - (value < 0)


def test_versions_sort_as_dpkg_sorts_them() -> None:
    for earlier, later in itertools.pairwise(ORDERED):
        assert compare_versions(earlier, later) < 0, (earlier, later)
        assert compare_versions(later, earlier) > 0, (later, earlier)
    assert compare_versions("1:1.4.7-1+b2", "1:1.4.7-1+b2") == 0


VERSION = st.from_regex(r"\A([0-9]:)?[0-9][0-9a-z.+~]{0,6}(-[0-9a-z.+~]{1,6})?\Z")


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg (Debian) to compare with")
@settings(max_examples=150, deadline=None)
@given(VERSION, VERSION)
def test_the_order_is_dpkgs_own(left: str, right: str) -> None:
    def dpkg_says(op: str) -> bool:
        return subprocess.run(["dpkg", "--compare-versions", left, op, right], check=False).returncode == 0

    expected = -1 if dpkg_says("lt") else (0 if dpkg_says("eq") else 1)
    assert sign(compare_versions(left, right)) == expected


def test_a_version_dpkg_would_refuse_is_refused_where_the_pin_is_written() -> None:
    with pytest.raises(ValueError, match="not a Debian version"):
        DebianPin("latest")
    assert split_version("1:1.4.7-1+b2") == (1, "1.4.7", "1+b2")
    assert split_version("7.17") == (0, "7.17", "")


def test_same_upstream_accepts_a_later_debian_revision_only() -> None:
    pin = DebianPin("1.6.20~ds1-1+deb12u3")
    assert pin.accepts_version("1.6.20~ds1-1+deb12u3")
    assert pin.accepts_version("1.6.20~ds1-1+deb12u4")
    assert not pin.accepts_version("1.6.20~ds1-1+deb12u2")
    assert not pin.accepts_version("1.6.21~ds1-1")
    assert not pin.accepts_version("1:1.6.20~ds1-1+deb12u3")


def test_newer_accepts_any_later_version_and_nothing_older() -> None:
    pin = DebianPin("156.0.8078.114-1~deb12u1", accepts="newer")
    assert pin.accepts_version("156.0.8078.129-1~deb12u1")
    assert pin.accepts_version("157.0.1-1~deb12u1")
    assert not pin.accepts_version("150.0.7871.100-1~deb12u1")


def test_the_pin_itself_wins_over_newer_offered_versions_and_otherwise_the_newest_accepted() -> None:
    pin = DebianPin("1.0-1", accepts="newer")
    assert choose_version(pin, ["1.0-2", "1.0-1", "0.9-1"]) == "1.0-1"
    assert choose_version(pin, ["1.0-2", "1.1-1", "0.9-1"]) == "1.1-1"
    assert choose_version(pin, ["0.9-1"]) is None

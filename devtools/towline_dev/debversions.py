"""Debian package versions: how they order, and which of the ones a mirror offers a pin accepts.

A pin names the version the project was tested with. Debian's archives keep only the newest
build of a package (a security or stable update replaces it, the old build is gone the same
day), so a pin also says what it accepts in its place:

- `same-upstream` (the default): this version or a later Debian revision of the same upstream
  version, e.g. `1.6.20~ds1-1+deb12u3` accepts `1.6.20~ds1-1+deb12u4` but not `1.6.21~ds1-1`.
  A stable release's security update of a tool changes only the Debian revision.
- `newer`: this version or any later one, for packages whose updates are new upstream releases
  by design (Chromium in bookworm-security moves to each new major; PostgreSQL's minor releases).

Versions are compared as dpkg compares them (deb-version(7)): epoch numerically, then the
upstream version and the Debian revision by dpkg's letter/digit walk, `~` sorting before
everything, even the end of the string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Accepts = Literal["same-upstream", "newer"]


@dataclass(frozen=True)
class DebianPin:
    """A pinned Debian package version and what the pin accepts when that build is gone."""

    version: str
    accepts: Accepts = "same-upstream"

    def __post_init__(self) -> None:
        split_version(self.version)  # a malformed pin fails where it is written

    def accepts_version(self, offered: str) -> bool:
        """Whether `offered` may stand in for the pinned version."""
        if compare_versions(offered, self.version) < 0:
            return False
        if self.accepts == "newer":
            return True
        epoch, upstream, _ = split_version(offered)
        pinned_epoch, pinned_upstream, _ = split_version(self.version)
        return (epoch, upstream) == (pinned_epoch, pinned_upstream)

    def describe(self) -> str:
        """The pin as a person reads it: `1.6.20~ds1-1+deb12u3 (or a later Debian revision)`."""
        also = "a later Debian revision" if self.accepts == "same-upstream" else "any newer version"
        return f"{self.version} (or {also})"


def choose_version(pin: DebianPin, offered: Iterable[str]) -> str | None:
    """The pinned version if offered, else the newest offered version the pin accepts, else None."""
    candidates = [version for version in offered if pin.accepts_version(version)]
    if pin.version in candidates:
        return pin.version
    newest: str | None = None
    for version in candidates:
        if newest is None or compare_versions(version, newest) > 0:
            newest = version
    return newest


_VERSION = re.compile(r"^(?:(\d+):)?([0-9][A-Za-z0-9.+~:-]*?)(?:-([A-Za-z0-9.+~]+))?$")


def split_version(version: str) -> tuple[int, str, str]:
    """(epoch, upstream version, Debian revision); ValueError for what dpkg would not take."""
    found = _VERSION.match(version)
    if found is None:
        raise ValueError(f"{version!r} is not a Debian version (deb-version(7): [epoch:]upstream[-revision])")
    epoch, upstream, revision = found.groups()
    return int(epoch or 0), upstream, revision or ""


def compare_versions(left: str, right: str) -> int:
    """Negative, zero or positive as `left` sorts before, with or after `right` (dpkg's order)."""
    left_parts, right_parts = split_version(left), split_version(right)
    if left_parts[0] != right_parts[0]:
        return left_parts[0] - right_parts[0]
    return _compare_part(left_parts[1], right_parts[1]) or _compare_part(left_parts[2], right_parts[2])


def _order(char: str) -> int:
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left: str, right: str) -> int:
    """dpkg's verrevcmp: alternating non-digit runs (by `_order`) and digit runs (numerically)."""
    i = j = 0
    while i < len(left) or j < len(right):
        while (i < len(left) and not left[i].isdigit()) or (j < len(right) and not right[j].isdigit()):
            a = _order(left[i]) if i < len(left) and not left[i].isdigit() else 0
            b = _order(right[j]) if j < len(right) and not right[j].isdigit() else 0
            if a != b:
                return a - b
            i += 1
            j += 1
        start_i, start_j = i, j
        while i < len(left) and left[i].isdigit():
            i += 1
        while j < len(right) and right[j].isdigit():
            j += 1
        a_num, b_num = int(left[start_i:i] or 0), int(right[start_j:j] or 0)
        if a_num != b_num:
            return a_num - b_num
    return 0

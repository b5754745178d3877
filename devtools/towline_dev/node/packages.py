"""The Debian packages the node runs (containerd, runc, CNI plugins, netfilter tools).

Installed through `towline_dev.debpackages` (only as root, only the versions
pinned in `towline_dev.versions`); a machine that has them is left alone.
"""

from __future__ import annotations

from collections.abc import Callable

from towline_dev.debpackages import PackagesUnavailable, ensure_debian_packages
from towline_dev.versions import DEBIAN_PACKAGES


class NodeUnavailable(RuntimeError):  # noqa: N818 - reads as the condition it reports
    """The node cannot run on this machine; the message says what is missing and how to fix it."""


def ensure_packages(progress: Callable[[str], None]) -> None:
    """Install the node's pinned packages that are missing, or say how to."""
    try:
        ensure_debian_packages(DEBIAN_PACKAGES, progress, purpose="the local node")
    except PackagesUnavailable as error:
        raise NodeUnavailable(str(error)) from None

"""`towline_build_info`: which Towline, Python and image a process runs, for dashboards and upgrades.

Both the operator and the webhook ingress export it. The version is the installed package's
(the image installs the wheel); the image is the reference the chart started the pod from
(`TOWLINE_IMAGE`, with its digest when the release pins one), empty outside a pod.
"""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import Info


def towline_version() -> str:
    try:
        return version("towline")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


BUILD_INFO = Info("towline_build", "The running Towline release, Python version and image (value is always 1).")
BUILD_INFO.info({"version": towline_version(), "python_version": platform.python_version(),
                 "image": os.environ.get("TOWLINE_IMAGE", "")})

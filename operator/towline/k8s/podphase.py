"""What a pod's phase says about its end, read once for every process that watches step pods.

Pure and light (no API calls, nothing of the engine): the operator (towline.k8s.observe, steppods, the runtime's
caches), the archive, whose import contract forbids the engine that towline.k8s.observe loads, and the web view
read a pod's end here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENDED_POD_PHASES = frozenset({"Succeeded", "Failed"})
"""A pod never leaves these: every container ended (with exit code 0 in all, or not), or the kubelet stopped it."""


def pod_succeeded(pod: Mapping[str, Any]) -> bool:
    """The pod's phase says every container ended with exit code 0 (final: a pod never leaves Succeeded)."""
    return (pod.get("status") or {}).get("phase") == "Succeeded"


def pod_ended(pod: Mapping[str, Any]) -> bool:
    """The pod's phase is final: Succeeded, or Failed (every container ended, one of them not with 0, or the
    kubelet stopped it)."""
    return (pod.get("status") or {}).get("phase") in ENDED_POD_PHASES

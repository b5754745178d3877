"""Run a call inside a named network namespace, from this process, on a thread of its own.

setns(2) with CLONE_NEWNET moves only the calling thread, so a short-lived thread
enters the namespace, makes what it must (e.g. a listening socket, which stays in
that namespace whichever thread later accepts on it) and ends; the rest of the
process never leaves its own namespace. Needs CAP_SYS_ADMIN (root).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def in_namespace(name: str, call: Callable[[], T]) -> T:
    """`call()` run in network namespace `name` (/run/netns/<name>); its result, or its exception."""
    path = Path("/run/netns", name)
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    outcome: dict[str, object] = {}

    def enter_and_call() -> None:
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(descriptor, CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns into network namespace {name}: {os.strerror(error)}")
            finally:
                os.close(descriptor)
            outcome["result"] = call()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=enter_and_call, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]

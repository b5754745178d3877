"""kopf without kubernetes-asyncio's generated client.

kopf's third-party helper (`kopf._cogs.helpers.thirdparty`) imports `kubernetes_asyncio.client` whenever the
package is installed, only to recognise its model objects, which Towline never hands to kopf. That import is
844 modules, ~47 MiB and ~0.8 s of CPU in every operator process. `kept_out` makes it fail while kopf is
imported, so kopf falls back to the stand-ins it has for a client that is not installed; afterwards the package
imports normally again (a kubeconfig with a credential plugin still loads it: `towline.k8s.kubeconfigplugins`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

PACKAGE = "kubernetes_asyncio"


@contextmanager
def kept_out() -> Iterator[None]:
    """Inside: importing kubernetes_asyncio raises ModuleNotFoundError, unless it was imported already."""
    if PACKAGE in sys.modules:
        yield
        return
    sys.modules[PACKAGE] = None  # type: ignore[assignment]  # Python's marker for "not importable"
    try:
        yield
    finally:
        if sys.modules.get(PACKAGE, ...) is None:
            del sys.modules[PACKAGE]

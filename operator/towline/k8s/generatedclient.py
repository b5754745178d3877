"""kopf without the Kubernetes clients' generated code.

kopf's third-party helper (`kopf._cogs.helpers.thirdparty`) imports `kubernetes_asyncio.client` and
`kubernetes.client` whenever those packages are installed, only to recognise their model objects, which
Towline never hands to kopf. kubernetes-asyncio's is 844 modules, ~47 MiB and ~0.8 s of CPU in every operator
process; the synchronous client (installed with the tests' tools, never in the image) another ~0.3 s.
`kept_out` makes those imports fail while kopf is imported, so kopf falls back to the stand-ins it has for a
client that is not installed; afterwards the packages import normally again (a kubeconfig with a credential
plugin still loads kubernetes-asyncio: `towline.k8s.kubeconfigplugins`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

PACKAGES = ("kubernetes_asyncio", "kubernetes")


@contextmanager
def kept_out() -> Iterator[None]:
    """Inside: importing one of PACKAGES raises ModuleNotFoundError, unless it was imported already."""
    hidden = [name for name in PACKAGES if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # Python's marker for "not importable"
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]

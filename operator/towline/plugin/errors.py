"""Every failure of a `kubectl towline` command as one line on stderr and an exit code.

1: the cluster said no or could not be asked (no kubeconfig, unreachable API
server, Forbidden, NotFound, any other refusal); 2: a usage mistake; 130: Ctrl-C.
A bug still ends in one line, naming the exception; `TOWLINE_DEBUG=1` shows its
traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from towline.k8s.client import ApiError, ApiUnavailable
from towline.k8s.kubeconfig import KubeconfigProblem
from towline.plugin.commands import NotFound
from towline.plugin.manifests import UsageError

INTERRUPTED = 130
# RBAC's refusal: `User "alice" cannot list resource "workflowruns" in API group "towline.dev" in the namespace "x"`
_RBAC = re.compile(r'cannot (\w+) resource "([^"]+)"(?: in API group "([^"]*)")?(?: in the namespace "([^"]+)")?')


def message(error: BaseException) -> tuple[str, int]:
    """The line to print and the exit code for an expected failure."""
    if isinstance(error, UsageError):
        return f"error: {one_line(str(error))}", 2
    if isinstance(error, (NotFound, KubeconfigProblem)):
        return f"error: {one_line(str(error))}", 1
    if isinstance(error, ApiUnavailable):
        return (f"error: {one_line(error.message)}; check that the cluster is up "
                "and the kubeconfig's server address (kubectl config view --minify)"), 1
    if isinstance(error, ApiError):
        return api_refusal(error), 1
    raise TypeError(f"not an expected failure: {error!r}")


def api_refusal(error: ApiError) -> str:
    text = one_line(error.message)
    if error.status == 403:
        match = _RBAC.search(text)
        if match:
            verb, resource, group, namespace = match.groups()
            kind = f"{resource}.{group}" if group else resource
            where = f" in namespace {namespace}" if namespace else " cluster-wide"
            return (f"error: forbidden: you may not {verb} {kind}{where}; your user lacks the RBAC permission "
                    f"(ask a cluster admin for a Role that grants it). The API server said: {text}")
        return f"error: forbidden (403): {text}"
    if error.status == 404:
        return f"error: not found (404): {text}"
    if error.status == 401:
        return (f"error: unauthorized (401): {text}; the kubeconfig's credentials were not accepted "
                "(expired token or certificate?)")
    return f"error from the API server ({error.status}): {text}"


def guarded(call: Callable[[], int], err: Callable[[str], None]) -> int:
    """Run a command; print any failure as one line and turn it into an exit code."""
    try:
        return call()
    except KeyboardInterrupt:
        err("interrupted")
        return INTERRUPTED
    except (UsageError, NotFound, KubeconfigProblem, ApiError) as error:
        line, code = message(error)
        err(line)
        return code
    except Exception as error:  # the promise: one line, never a traceback
        if os.environ.get("TOWLINE_DEBUG") == "1":
            raise
        err(f"error: unexpected {type(error).__name__}: {one_line(str(error))} (TOWLINE_DEBUG=1 shows the traceback)")
        return 1


def one_line(text: str) -> str:
    return " ".join(text.split())

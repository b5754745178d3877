"""Proof that the step pod's egress isolation is in effect before the action makes any call.

Kubernetes may start a pod before its NetworkPolicies are enforced, and some
clusters never enforce them. The operator therefore names a probe target in
TOWLINE_ISOLATION_PROBE (`address:port`, an IP literal): an endpoint that
accepts TCP connections from an unprotected pod (the `kubernetes` Service, i.e.
the API server) and that no step policy ever opens. The runner connects to it:

  connected         the pod is not isolated yet: wait, try again
  refused, timeout  the enforcer rejected or dropped the attempt: isolated
  or unreachable

Because the target is known to accept connections, a refusal can only come from
something in the path, i.e. the enforcer. The probe sends a SYN and, if it is
answered, closes at once: no byte of the step reaches the target. Residual risks
are in docs/security-egress-isolation.md.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.wire import EGRESS_NOT_ISOLATED_MESSAGE, ISOLATION_PROBE_ENV, parse_address_port

NOT_ISOLATED_MESSAGE = EGRESS_NOT_ISOLATED_MESSAGE
MAX_BUDGET_SECONDS = 30.0
"""The longest the runner waits for isolation; the step's own budget may cut it shorter."""
CONNECT_TIMEOUT_SECONDS = 1.0
"""The target answers a SYN within milliseconds when reachable; no answer within this counts as dropped."""
_FIRST_PAUSE, _MAX_PAUSE = 0.05, 0.5


class ProbeOutcome(Enum):
    CONNECTED = "connected"
    REFUSED = "refused"
    TIMED_OUT = "timed out"
    UNREACHABLE = "unreachable"

    @property
    def isolated(self) -> bool:
        return self is not ProbeOutcome.CONNECTED


@dataclass(frozen=True)
class ProbeTarget:
    address: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> ProbeTarget:
        """`address:port` (`[v6]:port`); a name is refused because resolving it could itself leak."""
        try:
            address, port = parse_address_port(text)
        except ValueError as exc:
            raise ActionError(ErrorClass.VALIDATION, f"{ISOLATION_PROBE_ENV} {exc}") from None
        return cls(address, port)


_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EACCES, errno.EPERM}


def probe_once(target: ProbeTarget, timeout: float = CONNECT_TIMEOUT_SECONDS) -> ProbeOutcome:
    """One TCP connect to `target`, closed at once: no payload is ever sent."""
    family = socket.AF_INET6 if ":" in target.address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((target.address, target.port))
        except TimeoutError:
            return ProbeOutcome.TIMED_OUT
        except ConnectionRefusedError:
            return ProbeOutcome.REFUSED
        except OSError as exc:
            if exc.errno in _UNREACHABLE:
                return ProbeOutcome.UNREACHABLE
            raise
        return ProbeOutcome.CONNECTED


@dataclass(frozen=True)
class IsolationReport:
    isolated: bool
    attempts: int
    waited_seconds: float
    last: ProbeOutcome


def await_isolation(
    target: ProbeTarget,
    budget_seconds: float,
    *,
    probe: Callable[[ProbeTarget, float], ProbeOutcome] = probe_once,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> IsolationReport:
    """Probe until the attempt is blocked or `budget_seconds` are spent, backing off up to half a second."""
    started = clock()
    pause = _FIRST_PAUSE
    attempts = 0
    while True:
        attempts += 1
        try:
            # Always the full connect timeout: a shorter one could mistake a slow answer for a drop.
            outcome = probe(target, CONNECT_TIMEOUT_SECONDS)
        except OSError:
            outcome = ProbeOutcome.CONNECTED  # an error we cannot read proves nothing: not isolated
        if outcome.isolated:
            return IsolationReport(True, attempts, clock() - started, outcome)
        remaining = budget_seconds - (clock() - started)
        if remaining <= 0:
            return IsolationReport(False, attempts, clock() - started, outcome)
        sleep(min(pause, remaining))
        pause = min(pause * 2, _MAX_PAUSE)


def isolation_budget(deadline_seconds: float) -> float:
    """At most MAX_BUDGET_SECONDS and at most a quarter of the step's deadline."""
    return min(MAX_BUDGET_SECONDS, deadline_seconds / 4)

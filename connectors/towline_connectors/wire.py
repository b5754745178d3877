"""Wire forms the operator and the connectors must agree on: bindings, CEL values as JSON, RFC 3339,
the isolation check's failure message.

A `when` or `${{ }}` binding (evaluated by the operator) and a `data.transform`
field (evaluated in the step's pod) must turn the same CEL value into the same
JSON, so both call `to_json_value` here. The operator imports this module
(an edge the import contracts allow explicitly), so it must stay standard
library only: no pydantic, no CEL, no I/O.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

_MICROSECONDS = 1_000_000

EGRESS_NOT_ISOLATED_MESSAGE = (
    "egress isolation not in effect on this cluster; the NetworkPolicy enforcer is missing or slow"
)
"""The runner's transient failure when its pod's egress isolation never appeared; the operator recognises it."""

# The built-in runner's own environment, beside the step protocol's names (towline_step.protocol's *_ENV).
ACTION_ENV = "TOWLINE_ACTION"
"""Step pod env: the action the runner runs, e.g. `http.request`."""
INPUT_ENV = "TOWLINE_INPUT"
"""Step pod env: the step's `with` as one JSON object, bindings resolved."""
NETWORK_ENV = "TOWLINE_NETWORK"
"""Step pod env: JSON of the in-pod network guard's rules (`allowHosts`, `allowPrivateCidrs`)."""
ISOLATION_PROBE_ENV = "TOWLINE_ISOLATION_PROBE"
"""Step pod env: `address:port` the runner must fail to reach before it runs the step (egress isolation)."""
CREDENTIAL_SECRETS_ENV = "TOWLINE_CREDENTIAL_SECRETS"
"""Step pod env: JSON alias -> Secret name, the step's `credentials` (names only, never values)."""
CREDENTIAL_KEYS_ENV = "TOWLINE_CREDENTIAL_KEYS"
"""Step pod env: JSON alias -> the Secret keys the step reads, the only keys its pod mounts (names only)."""
PREPARE_FLAG = "--prepare"
"""The runner's argument in a user step type's init container: prepare the pod, run no action."""
NAMESPACE_ENV = "TOWLINE_NAMESPACE"
"""Step pod env: the run's namespace, named in the missing-Secret failure's fix."""
DEADLINE_AT_ENV = "TOWLINE_DEADLINE_AT"
"""Step pod env: RFC 3339 time by which the runner must have written its result (the Job's creation plus its
TOWLINE_DEADLINE_SECONDS), so time the pod spent starting counts against the step as the kubelet counts it."""


def parse_address_port(text: str) -> tuple[str, int]:
    """`address:port` (`[v6]:port`) with an IP literal, as TOWLINE_ISOLATION_PROBE takes it; else ValueError.

    A name is refused: resolving it could itself leak, and the operator knows the address.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"must be an IP address and port such as 10.96.0.1:443, not {text!r}")
    try:
        address = ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        raise ValueError(f"must be an IP address and port such as 10.96.0.1:443, not {text!r}") from None
    return str(address), int(port_text)

TEMPLATE_MARKER = "${{"
"""What opens a `${{ expression }}` binding."""


def is_template(value: object) -> bool:
    """A string holding an unresolved `${{ }}` binding: its value is known only at run time."""
    return isinstance(value, str) and TEMPLATE_MARKER in value


def to_json_value(value: Any) -> Any:
    """A CEL result as JSON, in the forms of CEL's JSON mapping (google.protobuf's JSON).

    Timestamps become RFC 3339 in UTC (`2026-01-01T08:00:00Z`), durations seconds
    with an `s` (`90s`, `1.5s`), bytes base64; map keys become strings (`true`,
    `1`). A value with no JSON form (an optional, say) raises TypeError.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, timedelta):
        return duration_text(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {_key_text(key): to_json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(item) for item in value]
    raise TypeError(f"CEL returned a {type(value).__name__}, which has no JSON form")


def duration_text(value: timedelta) -> str:
    """`90s`, `1.5s`, `-0.000001s`: seconds, only the fraction digits needed (exact, never `1e+06s`)."""
    micros = (value.days * 86_400 + value.seconds) * _MICROSECONDS + value.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), _MICROSECONDS)
    if fraction == 0:
        return f"{sign}{seconds}s"
    return f"{sign}{seconds}.{fraction:06d}".rstrip("0") + "s"


def _key_text(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def rfc3339(moment: datetime, *, timespec: Literal["auto", "seconds", "microseconds"] = "auto") -> str:
    """`moment` in UTC with a `Z`; a naive time is taken as UTC.

    `seconds` is the form of a Kubernetes `metav1.Time`, `microseconds` of a
    `MicroTime` (Lease times); `auto` shows microseconds only when there are some.
    """
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return utc.isoformat(timespec=timespec).replace("+00:00", "Z")


def parse_rfc3339(text: str) -> datetime:
    """An RFC 3339 time (`Z`, `z` or an offset); raises ValueError for anything else.

    A time without an offset parses as naive: callers that need an instant check `tzinfo`.
    """
    if text.endswith(("z", "Z")):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text)

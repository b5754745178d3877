"""Where a step's pod may connect: the hosts fixed in the Workflow, never chosen by run inputs.

A step that mounts credentials may talk only to its `allowHosts`, or, when it
names none, to the literal hosts its inputs are written with (the host of its
URL, a connector's fixed endpoint). A templated host with credentials and no
`allowHosts` would let whoever supplies the run's inputs send the credentials
anywhere, so the step fails before it starts. A code step (code.python,
code.wasm) that connects anywhere must list its `allowHosts` whatever it mounts:
its own sockets do not pass the runner's SSRF guard, so an empty allowlist
("any public host") would open its ports to the whole internet. Validation
reports the same problems on the Workflow; this is the second line for a run
already in flight (a snapshot taken before the rule, a retry).
"""

from __future__ import annotations

from towline.api.workflow import Step
from towline.expressions import ExpressionError
from towline.validation.actions import ActionCatalog
from towline.validation.steps import code_hosts_message, templated_host_message


def allowed_hosts(step: Step, catalog: ActionCatalog) -> tuple[str, ...]:
    """The host allowlist the step's pod enforces; empty means any public host (a step without credentials)."""
    if step.allow_hosts:
        return tuple(step.allow_hosts)
    if step.action is None:
        return ()
    if catalog.is_code(step.action):
        if catalog.destination_hosts(step.action, step.with_):
            raise ExpressionError(f"allowHosts: {code_hosts_message(step.action)}")
        return ()
    if not step.credentials:
        return ()
    hosts = catalog.destination_hosts(step.action, step.with_)
    if any(host is None for host in hosts):
        raise ExpressionError(f"allowHosts: {templated_host_message(sorted(step.credentials))}")
    return tuple(dict.fromkeys(host for host in hosts if host is not None))

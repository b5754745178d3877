"""What the two code steps (code.python, code.wasm) share: limits as inputs, credentials, outcomes as results.

Limits are plain inputs (`memory`, `cpu`) because they are part of what the
step author decides, like its source; the operator reads them through the
action's `pod_needs` (no network, no credentials) to size the pod, and the
runner reads them again to size the sandbox inside it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator

from towline_connectors.codesandbox import SandboxLimits, SandboxOutcome, run_sandboxed
from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.models import CredentialRef
from towline_connectors.runtime import run_blocking
from towline_connectors.spec import PodNeeds
from towline_connectors.wire import is_template
from towline_step.protocol import RESULT_LIMIT_BYTES, clamp_delay_seconds

MAX_PROCESSES = 32
"""Processes and threads the code's user may have at once (RLIMIT_NPROC of a user id only this pod has)."""
DEADLINE_MARGIN_SECONDS = 1.0
"""Kept back from the step's budget so the runner still writes the result after killing the code."""
RESULT_ROOM = f"the result holds about {RESULT_LIMIT_BYTES // 1024} KiB"
"""What a code step's shrink hint tells its author the output must fit in: the step protocol's result limit."""

_MEMORY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|k|M|G)?$")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
_CPU = re.compile(r"^([0-9]+m|[0-9]+(\.[0-9]{1,3})?)$")


def memory_bytes(text: str) -> int:
    """A Kubernetes memory quantity (`128Mi`, `1Gi`, `500M`) in bytes; ValueError names the forms accepted."""
    match = _MEMORY.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a memory size; write it like 128Mi or 1Gi")
    return int(match.group(1)) * _UNITS[match.group(2)]


def memory_between(low: int, high: int) -> AfterValidator:
    """A validator for a memory input: a literal quantity within [low, high] bytes."""

    def check(text: str) -> str:
        if is_template(text):
            raise ValueError("must be written out (e.g. 128Mi), not bound: the pod is sized before the step runs")
        size = memory_bytes(text)
        if not low <= size <= high:
            raise ValueError(f"{text} is outside {low >> 20}Mi..{high >> 20}Mi")
        return text

    return AfterValidator(check)


def _check_cpu(text: str) -> str:
    if is_template(text) or _CPU.match(text) is None or text in ("0", "0m"):
        raise ValueError(f"{text!r} is not a CPU amount; write it like 500m or 1 (cores), written out")
    return text


CpuLimit = Annotated[str, AfterValidator(_check_cpu)]


def literal_memory(inputs: Mapping[str, Any], default: str) -> int:
    """The `memory` input in bytes for sizing the pod; the default when it is missing or unreadable."""
    value = inputs.get("memory", default)
    try:
        return memory_bytes(value if isinstance(value, str) else default)
    except ValueError:
        return memory_bytes(default)


def literal_cpu(inputs: Mapping[str, Any], default: str) -> str:
    value = inputs.get("cpu", default)
    try:
        return _check_cpu(value) if isinstance(value, str) else default
    except ValueError:
        return default


def code_pod_needs(
    inputs: Mapping[str, Any], default_memory: str, runner_share: int, config_map_file: tuple[str, str] | None = None
) -> PodNeeds:
    """A code step's pod: the code's memory plus the runner's share, its CPU limit, a user id of its own."""
    return PodNeeds(memory_limit_bytes=literal_memory(inputs, default_memory) + runner_share,
                    cpu_limit=literal_cpu(inputs, "1"), config_map_file=config_map_file, own_user=True)


def resolve_credentials(value: Any, ctx: ActionContext) -> Any:
    """`inputs` with every `{credential: alias, key: name}` replaced by that key's value (redacted wherever it shows).

    The pod mounts exactly these keys (the metadata reads the same references), so code sees the
    credentials its step binds and nothing else.
    """
    if isinstance(value, Mapping):
        if set(value) == {"credential", "key"} and all(isinstance(v, str) for v in value.values()):
            return ctx.secret(CredentialRef(credential=value["credential"], key=value["key"]))
        return {key: resolve_credentials(item, ctx) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_credentials(item, ctx) for item in value]
    return value


def code_log(ctx: ActionContext) -> Callable[[str], None]:
    """Where the code's printed lines go: the step's log, through its redactor like every line the runner writes."""

    def write(line: str) -> None:
        ctx.log.info("code: %s", line)

    return write


def sandbox_budget(ctx: ActionContext) -> float:
    return max(0.1, ctx.deadline.remaining() - DEADLINE_MARGIN_SECONDS)


async def run_in_sandbox(
    ctx: ActionContext, request: Mapping[str, Any], code_inputs: Any, payload: bytes, what: str, *,
    address_space_bytes: int | None = None,
) -> dict[str, Any]:
    """Run the host process on `request` and return its successful result document; a failure raises.

    The code gets `code_inputs` with its credential references resolved, the step's budget less the runner's
    margin, at most MAX_PROCESSES processes and (when given) that address space.
    """
    request = {**request, "inputs": resolve_credentials(code_inputs, ctx)}
    limits = SandboxLimits(wall_seconds=sandbox_budget(ctx), max_processes=MAX_PROCESSES,
                           address_space_bytes=address_space_bytes)
    outcome = await run_blocking(run_sandboxed, request, payload, limits, code_log(ctx))
    error = outcome_error(outcome, what)
    if error is not None:
        raise error
    assert outcome.document is not None
    return outcome.document


def outcome_error(outcome: SandboxOutcome, what: str) -> ActionError | None:
    """The step failure an outcome means (None when the code succeeded): the deadline, a crash, or the code's own."""
    if outcome.timed_out:
        return ActionError(ErrorClass.TIMEOUT, f"{what} ran past the step's time limit and was stopped after "
                                               f"{outcome.seconds:.1f}s (what was left of timeoutSeconds once the "
                                               "step's pod had started); raise timeoutSeconds if the work is real")
    document = outcome.document
    if document is None:
        return ActionError(ErrorClass.PERMANENT, f"{what}: {outcome.describe_exit()}")
    if document["ok"]:
        return None
    try:
        error_class = ErrorClass(str(document.get("errorClass")))
    except ValueError:
        error_class = ErrorClass.PERMANENT
    retry_after = document.get("retryAfterSeconds")
    message = str(document.get("message") or "failed")
    delay = clamp_delay_seconds(float(retry_after)) if isinstance(retry_after, (int, float)) else None
    return ActionError(error_class, f"{what}: {message}", retry_after_seconds=delay)

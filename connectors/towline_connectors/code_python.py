"""`code.python`: the step's own Python source, `main(inputs)` called in a sandboxed process of its pod.

The source is written out in the workflow (never bound, so no value can become
code) and checked when the workflow is validated: it must parse and define
`main` at the top level. It runs with the interpreter and the standard library
of the runner image, in a process of its own (towline_connectors.codehost) whose
address space and process count are capped, under a user id only this pod
has, on a read-only root with no ServiceAccount token. It reaches the network
only on the `ports` it declares, to the step's `allowHosts` or `egress`, once
the pod's isolation is proven. What it prints is the step's log (redacted);
what `main` returns is its output; what it raises fails the step.
"""

from __future__ import annotations

import ast
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from towline_connectors.code import RESULT_ROOM, CpuLimit, code_pod_needs, memory_between, memory_bytes, run_in_sandbox
from towline_connectors.context import ActionContext
from towline_connectors.models import InputModel, OutputModel
from towline_connectors.spec import (
    ActionResult,
    ActionSpec,
    Destination,
    Inputs,
    PodNeeds,
    RetryDefaults,
)
from towline_connectors.wire import is_template

SOURCE_LIMIT_BYTES = 65_536
"""The source's size cap (UTF-8 bytes): it travels in the Job's environment, whose values the kernel caps at 128 KiB."""
DEFAULT_MEMORY = "128Mi"
MIN_MEMORY, MAX_MEMORY = 64 << 20, 4 << 30
RUNNER_SHARE_BYTES = 160 << 20
"""The pod's memory limit is the code's `memory` plus this, for the runner that supervises it."""


def check_source(source: str) -> str:
    """Parse without running: a syntax error, or a missing `main`, is found when the workflow is validated."""
    if is_template(source):
        return source  # refused by PythonCodeInput as a whole: a field's template error would be deferred to run time
    size = len(source.encode())
    if size > SOURCE_LIMIT_BYTES:
        raise ValueError(f"is {size} bytes, over the {SOURCE_LIMIT_BYTES}-byte limit; move data into with.inputs "
                         "or split the step")
    try:
        tree = ast.parse(source, filename="with.source")
    except SyntaxError as error:
        where = f"line {error.lineno}" + (f", column {error.offset}" if error.offset else "")
        raise ValueError(f"is not valid Python: {error.msg} ({where})") from None
    mains = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and node.name == "main"]
    if not mains:
        raise ValueError("defines no top-level function main(inputs); add `def main(inputs):` returning the output")
    if isinstance(mains[-1], ast.AsyncFunctionDef):
        raise ValueError("main must be a plain function (def main(inputs)), not async")
    arguments = mains[-1].args
    if len(arguments.posonlyargs) + len(arguments.args) != 1 and arguments.vararg is None:
        raise ValueError("main must take exactly one argument, the inputs: def main(inputs)")
    return source


class PythonCodeInput(InputModel):
    """`with:` of code.python."""

    source: Annotated[str, AfterValidator(check_source)] = Field(
        description=f"Python defining main(inputs); at most {SOURCE_LIMIT_BYTES} bytes, written out (never bound).",
    )
    inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="The mapping main receives; bindings resolve first, {credential, key} becomes the key's value.",
    )
    memory: Annotated[str, memory_between(MIN_MEMORY, MAX_MEMORY)] = Field(
        default=DEFAULT_MEMORY, description="Address space of the code's process, interpreter included (~30Mi).",
    )
    cpu: CpuLimit = Field(default="1", description="The pod's CPU limit, e.g. 500m.")
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=list, max_length=16,
        description="TCP ports the code may connect to, on the step's allowHosts; none: no network at all.",
    )


    @model_validator(mode="after")
    def _source_is_written_out(self) -> PythonCodeInput:
        if is_template(self.source):
            raise ValueError("source must be written out, not bound (a value must never become code); pass data "
                             "through with.inputs instead")
        return self


class PythonCodeOutput(OutputModel):
    """Whatever main returned (JSON)."""


def python_destinations(inputs: Inputs) -> list[Destination]:
    ports = inputs.get("ports")
    if not isinstance(ports, list):
        return []
    return [Destination(None, port) for port in ports if isinstance(port, int) and 0 < port < 65536]


def python_pod_needs(inputs: Inputs) -> PodNeeds:
    return code_pod_needs(inputs, DEFAULT_MEMORY, RUNNER_SHARE_BYTES)


async def run_python_code(inputs: PythonCodeInput, ctx: ActionContext) -> ActionResult:
    request = {"kind": "python", "source": inputs.source}
    document = await run_in_sandbox(ctx, request, inputs.inputs, b"", "the code",
                                    address_space_bytes=memory_bytes(inputs.memory))
    return ActionResult(output=document.get("output"))


SPEC = ActionSpec(
    name="code.python",
    summary="Run your own Python main(inputs) in a sandboxed process (opt-in)",
    input_model=PythonCodeInput,
    output_model=PythonCodeOutput,
    run=run_python_code,
    mutating_for=lambda inputs: bool(python_destinations(inputs)),
    default_retry=RetryDefaults(limit=0, backoff="exponential", base_delay_seconds=5.0, max_delay_seconds=300.0),
    shrink_hint=f"return less from main ({RESULT_ROOM})",
    destinations_for=python_destinations,
    pod_needs_for=python_pod_needs,
    code=True,
)

"""`Step.main()`: one attempt of a step written with the SDK, as the step protocol runs it in a pod.

In order: wrap stdout and stderr in the redactor; read the environment; read
every credential file (registering each value with the redactor before any step
code runs); read and validate the inputs; call the function within its deadline
(SIGALRM at the deadline less a margin, and SIGTERM, stop it); validate what it
returned against the output model; write one result document; exit with the
protocol's code. Whatever the step function does, exactly one document is
written and `main()` returns an exit code: it never raises.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from towline_step.extra import sdk_missing

try:
    from pydantic import BaseModel, ValidationError
    from pydantic_core import PydanticSerializationError
except ModuleNotFoundError as missing:  # the step kit without its sdk extra
    raise sdk_missing(missing, "Step.main() (towline_step.runtime)") from missing

from towline_step.context import Context, load_credentials, read_environment
from towline_step.errors import InvalidInputError, PermanentError, StepError
from towline_step.protocol import INPUTS_PATH_ENV, ErrorClass, result_path_from
from towline_step.redact import RedactingStream, Redactor, TextSink, logging_to
from towline_step.result import Outcome, render

if TYPE_CHECKING:
    from towline_step.definition import Step

_MAX_LISTED_PROBLEMS = 10


def function_budget(deadline_seconds: float) -> float:
    """The step function's share of the deadline: a margin is kept to write the result before the pod is stopped."""
    margin = min(5.0, deadline_seconds * 0.1)
    return max(0.1, deadline_seconds - margin)


def read_inputs(path: Path, model: type[BaseModel]) -> BaseModel:
    """The inputs file as the step's input model; each way it can be wrong is a failure naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(
            f"the inputs file {path} (${INPUTS_PATH_ENV}) does not exist; Towline writes the step's `with` there "
            "before the step starts (to run a step locally, use python -m towline_step.harness)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise PermanentError(f"could not read the inputs file {path}: {error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:  # where, not what: the text is the workflow's data
        raise InvalidInputError(
            f"the inputs file {path} is not valid JSON (line {error.lineno}, column {error.colno})"
        ) from None
    if not isinstance(data, dict):
        raise InvalidInputError(
            f"the inputs file {path} must hold a JSON object (the step's `with`), not {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InvalidInputError(f"the step's inputs are invalid: {describe_problems(error, 'with')}") from None


def describe_problems(error: ValidationError, root: str) -> str:
    """Each problem as `with.items[0].name: Field required`: the path a workflow author edits, never the value."""
    problems = []
    for problem in error.errors(include_url=False, include_input=False):
        path = root
        for part in problem["loc"]:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        problems.append(f"{path}: {problem['msg']}")
    more = len(problems) - _MAX_LISTED_PROBLEMS
    listed = "; ".join(problems[:_MAX_LISTED_PROBLEMS])
    return listed + (f"; and {more} more" if more > 0 else "")


def checked_output(step: Step[Any, Any], returned: object) -> Any:
    """What the function returned, validated against the output model again, as JSON (by alias)."""
    model = step.output_model
    if isinstance(returned, dict):
        try:
            returned = model.model_validate(returned)
        except ValidationError as error:
            raise PermanentError(f"the step's output is invalid: {describe_problems(error, 'output')}") from None
    if not isinstance(returned, model):
        raise PermanentError(
            f"{step.name} returned {type(returned).__name__}, not its output model {model.__name__}"
        )
    try:
        # A model built with model_construct() or changed after validation is checked once more here.
        text = returned.model_dump_json(by_alias=True, warnings=False)  # the validation below names the field
        model.model_validate_json(text)
    except PydanticSerializationError as error:
        raise PermanentError(f"the step's output cannot be sent as JSON: {error}") from None
    except ValidationError as error:
        raise PermanentError(f"the step's output is invalid: {describe_problems(error, 'output')}") from None
    return json.loads(text)


class _StopError(BaseException):
    """The deadline or a SIGTERM, raised inside the step function; a BaseException so `except Exception` keeps out."""


class _Stopper:
    """Turns SIGALRM (the budget) and SIGTERM (the kubelet) into _StopError while the step function runs, only then."""

    def __init__(self) -> None:
        self.armed = False
        self.why: str | None = None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.why = self.why or (
            "hit its deadline" if signum == signal.SIGALRM else "was stopped (SIGTERM: the deadline or a cancel)"
        )
        if self.armed:
            self.armed = False
            raise _StopError

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """From the start of the attempt: a SIGTERM while the inputs are read is remembered, not fatal."""
        saved = {signum: signal.signal(signum, self._on_signal) for signum in (signal.SIGALRM, signal.SIGTERM)}
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for signum, handler in saved.items():
                signal.signal(signum, handler)


def call(step: Step[Any, Any], inputs: BaseModel, ctx: Context, stopper: _Stopper | None) -> Outcome:
    """Run the function and turn whatever happens into an outcome; only the step's own typed errors keep their class."""
    try:
        try:
            if stopper is not None:
                stopper.armed = stopper.why is None
                if not stopper.armed:
                    raise _StopError
            returned = step.function(inputs, ctx)
        finally:
            if stopper is not None:
                stopper.armed = False
        return Outcome(ok=True, output=checked_output(step, returned), usage=ctx.usage or None)
    except _StopError:
        why = stopper.why if stopper is not None and stopper.why else "was stopped"
        if step.mutating and not step.idempotency_key:
            return Outcome.failure(
                ErrorClass.UNKNOWN_SIDE_EFFECT,
                f"{step.name} {why} while running; it mutates and sends no idempotency key, so it may have made "
                "its change: check before replaying it",
            )
        return Outcome.failure(
            ErrorClass.TIMEOUT, f"{step.name} {why}; raise the step's timeoutSeconds if it needs longer"
        )
    except StepError as error:
        return Outcome.from_error(error)
    except (Exception, SystemExit) as error:
        # The traceback goes to the (redacted) log; the result names only the exception, its data may be anything.
        ctx.logger.error("%s raised %s:\n%s", step.name, type(error).__name__,
                         "".join(traceback.format_exception(error)).rstrip())
        first_line = str(error).strip().split("\n", 1)[0][:200]
        return Outcome.failure(
            ErrorClass.PERMANENT,
            f"{step.name} raised an unexpected {type(error).__name__}" + (f": {first_line}" if first_line else "")
            + " (the traceback is in the step's log)",
        )


def run_step(step: Step[Any, Any], environ: Mapping[str, str], *, redactor: Redactor, log: TextSink,
             handle_signals: bool = False) -> Outcome:
    """One attempt: environment, credentials, inputs, function, result document. Returns what it wrote."""
    stream = log if isinstance(log, RedactingStream) else RedactingStream(log, redactor)
    with logging_to(stream, f"towline_step.{step.name}") as logger:
        stopper = _Stopper() if handle_signals else None
        with contextlib.nullcontext() if stopper is None else stopper.installed():
            outcome = _attempt(step, environ, redactor, logger, stopper)
        outcome, text = render(outcome, redactor)
        path = result_path_from(environ)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as error:
            logger.error("could not write the result document to %s: %s", path, error.strerror)
        if outcome.ok:
            logger.info("step succeeded")
        else:
            logger.info("step failed: %s: %s", outcome.error_class, outcome.message)
    stream.flush()
    return outcome


def _attempt(step: Step[Any, Any], environ: Mapping[str, str], redactor: Redactor, logger: logging.Logger,
             stopper: _Stopper | None) -> Outcome:
    try:
        environment = read_environment(environ)
        credentials = load_credentials(environment.credentials_dir, redactor)
        inputs = read_inputs(environment.inputs_path, step.input_model)
    except StepError as error:
        return Outcome.from_error(error)
    budget = None if environment.deadline_seconds is None else function_budget(environment.deadline_seconds)
    ctx = Context(
        credentials=credentials, declared=step.declared_credentials(),
        idempotency_key=environment.idempotency_key, budget_seconds=budget,
        allow_hosts=environment.allow_hosts, step_type=environment.step_type, logger=logger,
    )
    if stopper is not None and budget is not None:
        signal.setitimer(signal.ITIMER_REAL, budget)
    return call(step, inputs, ctx, stopper)


def main(step: Step[Any, Any], environ: Mapping[str, str] | None = None) -> int:
    """The container's entry point: stdout and stderr redacted from the start, then one attempt; the exit code."""
    redactor = Redactor()
    saved = sys.stdout, sys.stderr
    stdout, stderr = RedactingStream(sys.stdout, redactor), RedactingStream(sys.stderr, redactor)
    sys.stdout, sys.stderr = stdout, stderr
    # Other libraries' log records reach stderr through the root logger, and so the redactor too.
    root_handler = logging.StreamHandler(stderr)
    root_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(root_handler)
    try:
        outcome = run_step(step, os.environ if environ is None else environ, redactor=redactor, log=stderr,
                           handle_signals=True)
        return outcome.exit_code
    finally:
        logging.getLogger().removeHandler(root_handler)
        stdout.flush()
        stderr.flush()
        sys.stdout, sys.stderr = saved

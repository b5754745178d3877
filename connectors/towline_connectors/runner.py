"""The step runner: the container command of every step Job (`python -m towline_connectors.runner`).

Contract (read from the environment):
  TOWLINE_ACTION            action name, e.g. `http.request`
  TOWLINE_INPUT             JSON object: the step's `with:`, bindings already resolved
  TOWLINE_CREDENTIALS_DIR   Secret volumes, one `<alias>/<key>` file per key
                            (default /var/run/towline/credentials)
  TOWLINE_CREDENTIAL_SECRETS  JSON alias -> Secret name; an alias whose mount holds no
                            key ends the attempt before the action runs (credcheck)
  TOWLINE_NAMESPACE         the run's namespace, named in that failure's fix
  TOWLINE_IDEMPOTENCY_KEY   sent to providers on mutating calls
  TOWLINE_DEADLINE_SECONDS  time budget; the action gets it minus a safety margin
  TOWLINE_DEADLINE_AT       optional RFC 3339 time the budget ends at the latest (the Job's creation plus
                            the budget): a pod that took long to start has that much less
  TOWLINE_NETWORK           optional JSON {"allowHosts": [...], "allowPrivateCidrs": [...]}
  TOWLINE_RESULT_PATH       where the result goes (default /dev/termination-log)
  TOWLINE_ISOLATION_PROBE   optional `address:port` the pod's NetworkPolicies must block;
                            when set, the action runs only once a connect to it is
                            refused or dropped (towline_connectors.isolation)

It writes exactly one JSON document to the result path — `ok`, `output`,
`errorClass`, `message`, `retryable`, `retryAfterSeconds`, `usage` — of at most
RESULT_LIMIT_BYTES, and exits 0 (ok), 75 (retryable), 1 (permanent) or 2
(validation / usage). Log lines go to stderr.

Every credential file is read and registered with the redactor before anything
else runs. This module must never emit a credential value: not on stdout or
stderr, not in a traceback, not in the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import ssl
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from towline_connectors.context import ActionContext, default_ssl_context, load_credentials, read_secret_files
from towline_connectors.credcheck import check_credentials, credential_keys, credential_secrets
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.isolation import (
    NOT_ISOLATED_MESSAGE,
    IsolationReport,
    ProbeTarget,
    await_isolation,
    isolation_budget,
)
from towline_connectors.netguard import NetGuard, NetworkRules, Resolver, system_resolver
from towline_connectors.prepare import DEFAULT_DEADLINE_SECONDS, PREPARE_FLAG
from towline_connectors.prepare import main as prepare_main
from towline_connectors.redact import RedactingStream, Redactor, TextSink, logging_to
from towline_connectors.registry import ACTIONS, format_validation_errors
from towline_connectors.result import (
    EXIT_OK,
    EXIT_PERMANENT,
    EXIT_RETRYABLE,
    EXIT_USAGE,
    StepResult,
    render_result,
)
from towline_connectors.runtime import Deadline
from towline_connectors.spec import ActionResult, ActionSpec
from towline_connectors.transport import Connector
from towline_connectors.wire import (
    ACTION_ENV,
    DEADLINE_AT_ENV,
    INPUT_ENV,
    ISOLATION_PROBE_ENV,
    NAMESPACE_ENV,
    NETWORK_ENV,
    parse_rfc3339,
)
from towline_step.protocol import (
    DEADLINE_SECONDS_ENV,
    IDEMPOTENCY_KEY_ENV,
    RESULT_LIMIT_BYTES,
    TRACEPARENT_ENV,
    credentials_dir_from,
    parse_traceparent,
    result_path_from,
)

_LOGGER_NAME = "towline_connectors"

__all__ = [
    "DEFAULT_DEADLINE_SECONDS",
    "EXIT_OK",
    "EXIT_PERMANENT",
    "EXIT_RETRYABLE",
    "EXIT_USAGE",
    "RESULT_LIMIT_BYTES",
    "RunnerSeams",
    "StepResult",
    "main",
    "read_config",
    "render_result",
    "run_step",
]


@dataclass(frozen=True)
class RunnerSeams:
    """What tests replace: DNS, the socket layer, trusted CAs, the action table, the clock."""

    resolver: Resolver = system_resolver
    connector: Connector | None = None
    ssl_context: ssl.SSLContext | None = None
    actions: Mapping[str, ActionSpec] = field(default_factory=lambda: ACTIONS)
    clock: Callable[[], float] = time.time
    handle_sigterm: bool = False
    await_isolation: Callable[[ProbeTarget, float], IsolationReport] = await_isolation


@dataclass(frozen=True)
class StepConfig:
    spec: ActionSpec
    inputs: dict[str, Any]
    idempotency_key: str | None
    deadline_seconds: float
    network: NetworkRules
    isolation_probe: ProbeTarget | None = None
    secrets: Mapping[str, str] = field(default_factory=dict)
    """alias -> Secret name (names only), from TOWLINE_CREDENTIAL_SECRETS."""
    namespace: str = ""
    credential_keys: Mapping[str, list[str]] = field(default_factory=dict)
    """alias -> the keys the step reads (names only), from TOWLINE_CREDENTIAL_KEYS."""
    traceparent: str | None = None
    """The attempt's span (TRACEPARENT, well formed), which http.request and webhook.send pass on; None: untraced."""


def _usage_error(message: str) -> ActionError:
    return ActionError(ErrorClass.VALIDATION, message)


def read_config(environ: Mapping[str, str], actions: Mapping[str, ActionSpec], now: float | None = None) -> StepConfig:
    """The step's settings from the environment; a bad one is a validation error naming it."""
    # Exactly as written: the chart's policy towline-step-objects reads this value to admit a code action only
    # where code steps are on, so the runner may not read a name the policy did not see (" code.python").
    name = environ.get(ACTION_ENV, "")
    if not name:
        raise _usage_error(f"{ACTION_ENV} is not set; it names the action to run, e.g. http.request")
    if name != name.strip():
        raise _usage_error(f"{ACTION_ENV} {name!r} has spaces around the action's name; write the name alone, "
                           "e.g. http.request")
    spec = actions.get(name)
    if spec is None:
        raise _usage_error(f"action {name!r} does not exist; use one of: {', '.join(sorted(actions))}")
    try:
        inputs = json.loads(environ.get(INPUT_ENV) or "{}")
    except ValueError as exc:
        raise _usage_error(f"{INPUT_ENV} is not valid JSON ({exc})") from None
    if not isinstance(inputs, dict):
        raise _usage_error(f"{INPUT_ENV} must be a JSON object (the step's `with:`)")
    raw_deadline = environ.get(DEADLINE_SECONDS_ENV) or str(DEFAULT_DEADLINE_SECONDS)
    try:
        deadline = float(raw_deadline)
    except ValueError:
        deadline = -1.0
    if not deadline > 0:
        raise _usage_error(f"{DEADLINE_SECONDS_ENV} must be a positive number of seconds, not {raw_deadline!r}")
    deadline = _within_deadline_at(environ.get(DEADLINE_AT_ENV, "").strip(), deadline, time.time() if now is None
                                   else now)
    try:
        network = NetworkRules.from_json(environ.get(NETWORK_ENV))
    except ValueError as exc:
        raise _usage_error(f"{NETWORK_ENV}: {exc}") from None
    key = environ.get(IDEMPOTENCY_KEY_ENV) or None
    probe_text = environ.get(ISOLATION_PROBE_ENV, "").strip()
    probe = ProbeTarget.parse(probe_text) if probe_text else None
    secrets = credential_secrets(environ)
    trace = parse_traceparent(environ.get(TRACEPARENT_ENV, "").strip())
    return StepConfig(spec, inputs, key, deadline, network, probe, secrets, environ.get(NAMESPACE_ENV, "").strip(),
                      credential_keys(environ), traceparent=trace.header() if trace is not None else None)


def _within_deadline_at(text: str, deadline: float, now: float) -> float:
    """The budget, shortened to end by TOWLINE_DEADLINE_AT when that comes first (never below 0.1 s)."""
    if not text:
        return deadline
    try:
        ends = parse_rfc3339(text).timestamp()
    except ValueError:
        raise _usage_error(f"{DEADLINE_AT_ENV} must be an RFC 3339 time, not {text!r}") from None
    return max(0.1, min(deadline, ends - now))


def check_isolation(config: StepConfig, logger: logging.Logger, seams: RunnerSeams) -> StepConfig | StepResult:
    """Wait until the pod's egress isolation is proven; the config comes back with the time spent taken off."""
    if config.isolation_probe is None:
        return config
    report = seams.await_isolation(config.isolation_probe, isolation_budget(config.deadline_seconds))
    if not report.isolated:
        logger.error("egress isolation not in effect after %.2fs (%d probes of %s, last %s)",
                     report.waited_seconds, report.attempts, config.isolation_probe, report.last.value)
        return StepResult.failure(ActionError(ErrorClass.TRANSIENT, NOT_ISOLATED_MESSAGE))
    logger.info("egress isolation in effect after %.3fs (%d probes, %s)",
                report.waited_seconds, report.attempts, report.last.value)
    return replace(config, deadline_seconds=max(0.1, config.deadline_seconds - report.waited_seconds))


def action_budget(deadline_seconds: float) -> float:
    """The action's share of the deadline: a margin is kept to write the result and exit."""
    margin = min(5.0, deadline_seconds * 0.1)
    return max(0.1, deadline_seconds - margin)


class _DeadlineExceededError(Exception):
    pass


class _Termination:
    """Turns the kubelet's SIGTERM (activeDeadlineSeconds, deletion) into a cancelled action.

    The signal may arrive before the event loop starts, so it is remembered;
    while the action runs it cancels the action's task, and a result is still
    written before the process exits.
    """

    def __init__(self) -> None:
        self.requested = False
        self._target: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.requested = True
        if self._target is not None:
            loop, task = self._target
            loop.call_soon_threadsafe(task.cancel)

    @contextlib.contextmanager
    def watching(self, task: asyncio.Task[Any] | None) -> Iterator[None]:
        if task is not None:
            self._target = (asyncio.get_running_loop(), task)
        try:
            if self.requested:
                raise asyncio.CancelledError
            yield
        finally:
            self._target = None


_TERMINATION = _Termination()


async def _run_with_deadline(
    spec: ActionSpec, model: BaseModel, ctx: ActionContext, budget: float, handle_sigterm: bool
) -> ActionResult:
    watch = _TERMINATION.watching(asyncio.current_task()) if handle_sigterm else contextlib.nullcontext()
    try:
        with watch:
            async with asyncio.timeout(budget) as scope:
                return await spec.run(model, ctx)
    except TimeoutError:
        if scope.expired():
            raise _DeadlineExceededError from None
        raise


def _interrupted(config: StepConfig, ctx: ActionContext, why: str) -> StepResult:
    if config.spec.is_mutating(config.inputs) and ctx.side_effects.sent:
        return StepResult.failure(
            ActionError(
                ErrorClass.UNKNOWN_SIDE_EFFECT,
                f"{why} after the request was sent; it may have taken effect, so check before replaying it",
            )
        )
    return StepResult.failure(ActionError(ErrorClass.TIMEOUT, f"{why}; raise the step's timeout if it needs longer"))


def _output_json(result: ActionResult) -> Any:
    if isinstance(result.output, BaseModel):
        return result.output.model_dump(mode="json", by_alias=True)
    return json.loads(json.dumps(result.output, default=str))


def execute(config: StepConfig, ctx: ActionContext, seams: RunnerSeams) -> StepResult:
    """Validate the inputs and run the action within its budget; never raises."""
    spec = config.spec
    log = ctx.log
    try:
        model = spec.input_model.model_validate(config.inputs)
    except ValidationError as exc:
        problems = format_validation_errors(exc.errors(), spec.input_model)
        return StepResult.failure(ActionError(ErrorClass.VALIDATION, "; ".join(problems)))
    budget = action_budget(config.deadline_seconds)
    log.info("running %s (budget %.1fs of a %.1fs deadline)", spec.name, budget, config.deadline_seconds)
    try:
        outcome = asyncio.run(_run_with_deadline(spec, model, ctx, budget, seams.handle_sigterm))
        output = _output_json(outcome)
    except _DeadlineExceededError:
        return _interrupted(config, ctx, f"{spec.name} hit the step deadline ({budget:.1f}s)")
    except asyncio.CancelledError:
        return _interrupted(config, ctx, f"{spec.name} was terminated")
    except ActionError as exc:
        return StepResult.failure(exc)
    except Exception as exc:
        log.error("%s failed unexpectedly:\n%s", spec.name, "".join(traceback.format_exception(exc)).rstrip())
        error_class = (
            ErrorClass.UNKNOWN_SIDE_EFFECT
            if spec.is_mutating(config.inputs) and ctx.side_effects.sent
            else ErrorClass.PERMANENT
        )
        return StepResult.failure(
            ActionError(error_class, f"internal error in {spec.name}: {type(exc).__name__}: {exc}")
        )
    return StepResult(ok=True, output=output, usage=outcome.usage)


def run_step(
    environ: Mapping[str, str],
    *,
    redactor: Redactor,
    log: TextSink,
    seams: RunnerSeams | None = None,
) -> StepResult:
    """Run one step as the environment describes and write its result document."""
    seams = seams or RunnerSeams()
    credentials_dir = credentials_dir_from(environ)
    for value in read_secret_files(credentials_dir):
        redactor.add(value)
    result_path = result_path_from(environ)
    stream = log if isinstance(log, RedactingStream) else RedactingStream(log, redactor)
    shrink_hint = "return less data from this step"
    with logging_to(stream, _LOGGER_NAME) as logger:
        try:
            config = read_config(environ, seams.actions, seams.clock())
        except ActionError as exc:
            result = StepResult.failure(exc)
        else:
            shrink_hint = config.spec.shrink_hint
            missing = check_credentials(config.secrets, config.namespace, credentials_dir, config.credential_keys)
            checked = missing or check_isolation(config, logger, seams)
            if isinstance(checked, StepResult):
                result = checked
            else:
                result = _prepare_and_execute(checked, credentials_dir, redactor, logger, seams)
        result, text = render_result(result, redactor, shrink_hint)
        _write_result(result_path, text, logger)
        if result.ok:
            logger.info("step succeeded")
        else:
            logger.info("step failed: %s: %s", result.error_class, redactor.redact(result.message or ""))
    stream.flush()
    return result


def _prepare_and_execute(
    config: StepConfig,
    credentials_dir: Path,
    redactor: Redactor,
    logger: logging.Logger,
    seams: RunnerSeams,
) -> StepResult:
    key = config.idempotency_key
    if key is None:
        key = f"towline-{uuid.uuid4().hex}"
    if config.idempotency_key is None and config.spec.is_mutating(config.inputs):
        logger.warning("%s is not set; using a one-off key, so a retry is not deduplicated", IDEMPOTENCY_KEY_ENV)
    try:
        ctx = ActionContext(
            credentials=load_credentials(credentials_dir, config.secrets),
            redactor=redactor,
            guard=NetGuard(config.network, seams.resolver),
            idempotency_key=key,
            deadline=Deadline.after(action_budget(config.deadline_seconds)),
            ssl_context=seams.ssl_context or default_ssl_context(),
            connector=seams.connector,
            clock=seams.clock,
            log=logger,
            traceparent=config.traceparent,
        )
    except (OSError, ssl.SSLError) as exc:
        logger.error("could not prepare the step: %s", exc)
        return StepResult.failure(ActionError(ErrorClass.TRANSIENT, f"could not prepare the step: {exc}"))
    return execute(config, ctx, seams)


def _write_result(path: Path, text: str, logger: logging.Logger) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        logger.error("could not write the result to %s: %s", path, exc)


def main() -> int:
    """Entry point: wrap stdout/stderr in the redactor first, then run the step (or only prepare a user type's)."""
    if sys.argv[1:] == [PREPARE_FLAG]:
        return prepare_main()
    redactor = Redactor()
    stdout = RedactingStream(sys.stdout, redactor)
    stderr = RedactingStream(sys.stderr, redactor)
    sys.stdout, sys.stderr = stdout, stderr
    logging.basicConfig(stream=stderr, level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _TERMINATION.install()
    try:
        return run_step(os.environ, redactor=redactor, log=stderr, seams=RunnerSeams(handle_sigterm=True)).exit_code
    finally:
        stdout.flush()
        stderr.flush()


if __name__ == "__main__":
    sys.exit(main())

"""`python -m towline_connectors.runner --prepare`: the init container of a user step type's pod.

Before the user's container starts (the kubelet runs it only after this exits
0), in this order:

1. every Secret the step binds is mounted with the keys its type declares
   (else an `auth` failure naming them, as for a built-in action);
2. the pod's egress isolation is in effect: a connect to TOWLINE_ISOLATION_PROBE
   is refused or dropped (else the transient "not isolated" failure);
3. the resolved inputs (TOWLINE_INPUT) are written to TOWLINE_INPUTS_PATH on the
   volume the user's container mounts read-only.

A failure writes the result document to the termination message and exits
non-zero, so the attempt ends there and the user's code never runs. Success
writes no document: the user's container writes the attempt's result.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping

from towline_connectors.credcheck import check_credentials, credential_keys, credential_secrets
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.isolation import (
    NOT_ISOLATED_MESSAGE,
    IsolationReport,
    ProbeTarget,
    await_isolation,
    isolation_budget,
)
from towline_connectors.redact import RedactingStream, Redactor, TextSink, logging_to
from towline_connectors.result import StepResult, render_result
from towline_connectors.wire import INPUT_ENV, ISOLATION_PROBE_ENV, NAMESPACE_ENV, PREPARE_FLAG
from towline_step.protocol import DEADLINE_SECONDS_ENV, credentials_dir_from, inputs_path_from, result_path_from

__all__ = ["DEFAULT_DEADLINE_SECONDS", "PREPARE_FLAG", "main", "prepare", "run_prepare"]

DEFAULT_DEADLINE_SECONDS = 300.0
"""The step's time budget when its pod sets no TOWLINE_DEADLINE_SECONDS (the runner's and its prepare step's)."""

Isolation = Callable[[ProbeTarget, float], IsolationReport]


def prepare(environ: Mapping[str, str], *, log: logging.Logger, isolation: Isolation = await_isolation) -> StepResult:
    """Check Secrets, wait for isolation, write the inputs; the failure if any step of that fails."""
    try:
        inputs = json.loads(environ.get(INPUT_ENV) or "{}")
        if not isinstance(inputs, dict):
            raise ValueError("not a JSON object")
        deadline = float(environ.get(DEADLINE_SECONDS_ENV) or DEFAULT_DEADLINE_SECONDS)
        secrets = credential_secrets(environ)
        keys = credential_keys(environ)
        probe_text = environ.get(ISOLATION_PROBE_ENV, "").strip()
        probe = ProbeTarget.parse(probe_text) if probe_text else None
    except ActionError as error:
        return StepResult.failure(error)
    except ValueError as error:
        return StepResult.failure(ActionError(ErrorClass.VALIDATION, f"the step pod's settings are broken: {error}"))
    missing = check_credentials(secrets, environ.get(NAMESPACE_ENV, "").strip(), credentials_dir_from(environ), keys)
    if missing is not None:
        return missing
    if probe is not None:
        report = isolation(probe, isolation_budget(deadline))
        if not report.isolated:
            log.error("egress isolation not in effect after %.2fs (%d probes of %s, last %s)",
                      report.waited_seconds, report.attempts, probe, report.last.value)
            return StepResult.failure(ActionError(ErrorClass.TRANSIENT, NOT_ISOLATED_MESSAGE))
        log.info("egress isolation in effect after %.3fs (%d probes, %s)",
                 report.waited_seconds, report.attempts, report.last.value)
    target = inputs_path_from(environ)
    try:
        target.write_text(json.dumps(inputs, separators=(",", ":")), encoding="utf-8")
    except OSError as error:
        return StepResult.failure(ActionError(ErrorClass.TRANSIENT, f"could not write the step's inputs: {error}"))
    log.info("inputs written to %s; the step's container starts next", target)
    return StepResult(ok=True)


def run_prepare(environ: Mapping[str, str], *, log: TextSink, isolation: Isolation = await_isolation) -> int:
    """Prepare, write the result document only on failure, and return the exit code."""
    redactor = Redactor()  # the documents name Secrets, never hold values; redacting keeps it so if that changes
    stream = RedactingStream(log, redactor)
    with logging_to(stream, "towline_connectors.prepare") as logger:
        result = prepare(environ, log=logger, isolation=isolation)
        if not result.ok:
            result, text = render_result(result, redactor, "")
            path = result_path_from(environ)
            try:
                path.write_text(text, encoding="utf-8")
            except OSError as error:
                logger.error("could not write the result to %s: %s", path, error)
            logger.info("prepare failed: %s: %s", result.error_class, result.message)
    stream.flush()
    return result.exit_code if not result.ok else 0


def main() -> int:
    return run_prepare(os.environ, log=sys.stderr)

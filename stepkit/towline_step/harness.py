"""Run a step type locally, the way its pod would, and print the result as the operator would read it.

    python -m towline_step.harness greeter:greet --with '{"name": "Ada"}'
    python -m towline_step.harness --with '{"name": "Ada"}' --command ./greeter-go

It lays out a temporary directory like the step pod (the inputs file, one file
per credential key, an empty termination-message file), starts the step in a
subprocess with the protocol's environment (a decorated function through
`python -m towline_step`, so its `main()` runs; or any command, in any
language), reads the result document it wrote with the protocol's strict
reader and prints a JSON report on stdout: the exit code, the result, and any
notes (no document, an exit code that contradicts it, a credential value in
the step's logs or result). The step's own output goes to stderr. Exits 0 only
when the step succeeded and nothing was noted.

Standard library and the protocol module only. It is a development tool: it
never runs in a step pod and emulates none of the pod's isolation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from towline_step.context import StepEnvironment
from towline_step.protocol import (
    CREDENTIAL_KEY_PATTERN,
    CREDENTIAL_SLOT_PATTERN,
    EXIT_OK,
    ResultDocument,
    exit_code_for,
    missing_result,
    read_result_message,
)

NOT_EMULATED = """\
What it does not emulate: the step's NetworkPolicy (the step reaches whatever
this machine reaches; --allow-host only sets TOWLINE_ALLOW_HOSTS), the init
container that proves egress isolation before the step starts, the container
image and its user (uid 65532), the read-only root filesystem (only /tmp and
the termination message are writable in a pod), resource limits, and the
kubelet's 4096-byte cut of the termination message (the strict reader refuses
a longer document here, as the operator does). Credential values given on the
command line are visible to other local users in the process list: prefer
--credential slot/key=@file.
"""
GRACE_SECONDS = 10.0
"""Between SIGTERM at the deadline and SIGKILL, as a pod's termination grace period (shorter)."""
_CREDENTIAL = re.compile(rf"({CREDENTIAL_SLOT_PATTERN})/({CREDENTIAL_KEY_PATTERN})=(.*)", re.DOTALL)


@dataclass(frozen=True)
class HarnessReport:
    """What one local run produced, as the operator would judge it."""

    exit_code: int
    result: ResultDocument
    result_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    logs: str = ""

    @property
    def succeeded(self) -> bool:
        return self.result.ok and self.exit_code == EXIT_OK and not self.notes

    def as_json(self) -> dict[str, Any]:
        result = self.result.wire_form(self.result.retryable)
        return {"exitCode": self.exit_code, "resultBytes": self.result_bytes, "result": result, "notes": self.notes}


def python_step_command(target: str) -> list[str]:
    """How a decorated function runs in its container: this interpreter, `-m towline_step <module>:<attribute>`."""
    return [sys.executable, "-m", "towline_step", target]


def run_locally(
    command: Sequence[str],
    *,
    inputs: Mapping[str, Any],
    credentials: Mapping[tuple[str, str], bytes] | None = None,
    allow_hosts: Sequence[str] = (),
    idempotency_key: str | None = None,
    deadline_seconds: float = 60.0,
    step_type: str = "steptype/local",
    cwd: Path | None = None,
) -> HarnessReport:
    """Run the command once in a pod-like directory and read what it left; never raises for what the step does."""
    with tempfile.TemporaryDirectory(prefix="towline-step-") as scratch:
        root = Path(scratch)
        inputs_path = root / "step" / "inputs.json"
        inputs_path.parent.mkdir()
        inputs_path.write_text(json.dumps(dict(inputs)), encoding="utf-8")
        inputs_path.chmod(0o444)
        credentials_dir = root / "credentials"
        credentials_dir.mkdir()
        for (slot, key), value in (credentials or {}).items():
            (credentials_dir / slot).mkdir(exist_ok=True)
            (credentials_dir / slot / key).write_bytes(value)
            (credentials_dir / slot / key).chmod(0o400)
        result_path = root / "termination-log"
        result_path.touch()
        environ = {name: value for name, value in os.environ.items() if not name.startswith("TOWLINE_")}
        environ.update(StepEnvironment(
            inputs_path=inputs_path, credentials_dir=credentials_dir, result_path=result_path,
            idempotency_key=idempotency_key or f"local-{uuid.uuid4().hex}", deadline_seconds=deadline_seconds,
            allow_hosts=tuple(allow_hosts), step_type=step_type,
        ).environ())
        exit_code, logs, notes = _run(command, environ, deadline_seconds, cwd)
        raw = result_path.read_bytes()
    return _judge(exit_code, raw, logs, notes, credentials or {})


def _run(
    command: Sequence[str], environ: dict[str, str], deadline: float, cwd: Path | None
) -> tuple[int, str, list[str]]:
    notes: list[str] = []
    try:
        process = subprocess.Popen(list(command), env=environ, cwd=cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as error:
        return 127, "", [f"the command could not start: {error.strerror}: {command[0]}"]
    try:
        output, _ = process.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        notes.append(f"the step ran past its {deadline:g}s deadline and was sent SIGTERM, as the kubelet would")
        process.terminate()
        try:
            output, _ = process.communicate(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            notes.append(f"it was still running {GRACE_SECONDS:g}s after SIGTERM and was killed")
            process.kill()
            output, _ = process.communicate()
    return process.returncode, output.decode("utf-8", "replace"), notes


def _judge(exit_code: int, raw: bytes, logs: str, notes: list[str],
           credentials: Mapping[tuple[str, str], bytes]) -> HarnessReport:
    text = raw.decode("utf-8", "surrogateescape")
    if not text.strip():
        notes.append("the step wrote no result document; the operator counts the attempt by its exit code alone")
        result = missing_result(exit_code)
    else:
        read = read_result_message(text)
        if read is None:
            notes.append("the result is not JSON; the operator fails the attempt quoting the text")
            result = ResultDocument(ok=False, message=f"not JSON: {text[:200]!r}")
        else:
            result = read
        expected = exit_code_for(None if result.ok else result.error_class)
        if read is not None and exit_code != expected:
            notes.append(f"exit code {exit_code} does not match the result document (the protocol's code for it "
                         f"is {expected})")
    for (slot, key), value in credentials.items():
        secret = value.decode("utf-8", "surrogateescape").strip()
        if secret and secret in logs:
            notes.append(f"the value of credential {slot}/{key} appears in the step's logs")
        if secret and secret in text:
            notes.append(f"the value of credential {slot}/{key} appears in the result document")
    return HarnessReport(exit_code, result, len(raw), notes, logs)


def _object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{where} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a JSON object (the step's `with`)")
    return value


def _credential(text: str) -> tuple[tuple[str, str], bytes]:
    match = _CREDENTIAL.fullmatch(text)
    if match is None or match.group(2) in {".", ".."}:
        raise ValueError(f"--credential takes slot/key=value or slot/key=@file, not {text.split('=', 1)[0]!r}...")
    slot, key, value = match.groups()
    if value.startswith("@"):
        return (slot, key), Path(value[1:]).read_bytes()
    return (slot, key), value.encode("utf-8")


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="python -m towline_step.harness", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a step type locally with the step protocol's inputs, credentials and environment, "
        "and print its result document as the operator reads it (JSON on stdout; the step's logs on stderr). "
        "Exits 0 when the step succeeded, else its exit code (or 1).",
        epilog=NOT_EMULATED,
    )
    parse.add_argument("target", nargs="?", help="<module>:<attribute> of a function decorated with @step, "
                       "imported from the current directory")
    parse.add_argument("--command", nargs=argparse.REMAINDER, metavar="CMD",
                       help="run this command instead (any language); must come last")
    parse.add_argument("--with", dest="with_json", default="{}", help="the step's inputs, a JSON object")
    parse.add_argument("--with-file", type=Path, help="a JSON file of inputs; --with's keys override its keys")
    parse.add_argument("--credential", action="append", default=[], metavar="SLOT/KEY=VALUE",
                       help="a bound credential key (repeat); VALUE may be @file")
    parse.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="an allowed host (repeat)")
    parse.add_argument("--idempotency-key", help="default: a new local-<uuid> per run")
    parse.add_argument("--deadline", type=float, default=60.0, metavar="SECONDS", help="default: 60")
    parse.add_argument("--step-type", default="steptype/local", help="TOWLINE_STEP_TYPE (default: steptype/local)")
    return parse


def main(argv: list[str] | None = None) -> int:
    parse = parser()
    options = parse.parse_args(argv)
    if bool(options.target) == bool(options.command):
        parse.error("give either <module>:<attribute> or --command CMD [ARG...]")
    try:
        inputs = _object(options.with_file.read_text(encoding="utf-8"), str(options.with_file)) \
            if options.with_file else {}
        inputs.update(_object(options.with_json, "--with"))
        credentials = dict(_credential(item) for item in options.credential)
    except (OSError, ValueError) as error:
        parse.error(str(error))
    if not options.deadline > 0:
        parse.error("--deadline must be a positive number of seconds")
    command = options.command or python_step_command(options.target)
    report = run_locally(command, inputs=inputs, credentials=credentials, allow_hosts=options.allow_host,
                         idempotency_key=options.idempotency_key, deadline_seconds=options.deadline,
                         step_type=options.step_type)
    sys.stderr.write(report.logs)
    print(json.dumps(report.as_json(), indent=2, ensure_ascii=False))
    if report.succeeded:
        return 0
    return report.exit_code if report.exit_code > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

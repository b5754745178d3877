"""A step pod's files and environment in a temporary directory, for running steps in-process and in the harness."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from towline_step.protocol import (
    ALLOW_HOSTS_ENV,
    CREDENTIALS_DIR_ENV,
    DEADLINE_SECONDS_ENV,
    IDEMPOTENCY_KEY_ENV,
    INPUTS_PATH_ENV,
    PROTOCOL_VERSION_ENV,
    RESULT_PATH_ENV,
    STEP_TYPE_ENV,
    ResultDocument,
    read_result_message,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
GREETER_DIR = REPO_ROOT / "examples" / "step-types" / "greeter-python"


@dataclass
class StepPod:
    """The inputs file, the credentials directory and the termination message, laid out as in a step pod."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        (self.root / "step").mkdir()
        (self.root / "credentials").mkdir()
        self.result_path.touch()
        self.env.update({
            PROTOCOL_VERSION_ENV: "1",
            STEP_TYPE_ENV: "steptype/test",
            INPUTS_PATH_ENV: str(self.inputs_path),
            CREDENTIALS_DIR_ENV: str(self.root / "credentials"),
            RESULT_PATH_ENV: str(self.result_path),
            IDEMPOTENCY_KEY_ENV: "run-uid-step-1",
            DEADLINE_SECONDS_ENV: "60",
            ALLOW_HOSTS_ENV: '["api.example.test"]',
        })

    @property
    def inputs_path(self) -> Path:
        return self.root / "step" / "inputs.json"

    @property
    def result_path(self) -> Path:
        return self.root / "termination-log"

    def given(self, inputs: Any) -> StepPod:
        self.inputs_path.write_text(json.dumps(inputs))
        return self

    def credential(self, slot: str, key: str, value: str) -> StepPod:
        (self.root / "credentials" / slot).mkdir(exist_ok=True)
        (self.root / "credentials" / slot / key).write_text(value)
        return self

    def raw_result(self) -> str:
        return self.result_path.read_text(encoding="utf-8")

    def document(self) -> dict[str, Any]:
        document = json.loads(self.raw_result())
        assert isinstance(document, dict)
        return document

    def read(self) -> ResultDocument:
        """The result as the operator reads it: the strict reader must accept what the SDK wrote."""
        result = read_result_message(self.raw_result())
        assert result is not None
        return result

"""The example step types' manifests are StepTypes the operator accepts: what the SDK and a hand-written
manifest declare parses into the operator's model, and the local image policy allows their images."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from towline.api.steptype import ResolvedStepType, StepType
from towline.validation.steptypes import StepImagePolicy, check_step_type
from towline_dev import REPO_ROOT
from towline_dev.release import STEP_TYPE_IMAGE_PREFIX

MANIFESTS = sorted((REPO_ROOT / "examples" / "step-types").glob("*/steptype.yaml"))


def test_there_are_two_examples_in_two_languages() -> None:
    assert [path.parent.name for path in MANIFESTS] == ["greeter-python", "tcp-probe-go"]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.parent.name)
def test_each_example_is_a_usable_step_type(path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    StepType.model_validate(body)
    checked = check_step_type(body, StepImagePolicy(allowed_prefixes=(STEP_TYPE_IMAGE_PREFIX,)))
    assert isinstance(checked, ResolvedStepType), checked

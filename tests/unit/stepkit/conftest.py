"""Fixtures for the step kit's tests: a step pod's layout in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from stepkit_testkit import StepPod


@pytest.fixture
def pod(tmp_path: Path) -> StepPod:
    return StepPod(tmp_path)

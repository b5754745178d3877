"""Fixtures of the attack modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.attacks.attack_support import AsOperator, wait_until_policies_enforced

from towline_dev.controlplane import ControlPlane


@pytest.fixture
def policies_enforced(towline_installed: ControlPlane) -> None:
    """For modules whose attacks the chart's admission policies must refuse: wait until they are enforced."""
    wait_until_policies_enforced(towline_installed)


@pytest.fixture
def as_operator(towline_installed: ControlPlane, tmp_path: Path) -> AsOperator:
    """The operator's ServiceAccount with a fresh token of it, and nothing else (kubectl, or requests of its own)."""
    return AsOperator.made(towline_installed, tmp_path)

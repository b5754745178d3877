"""Fixtures of the attack modules."""

from __future__ import annotations

import pytest
from tests.integration.attacks.attack_support import wait_until_policies_enforced

from towline_dev.controlplane import ControlPlane


@pytest.fixture
def policies_enforced(towline_installed: ControlPlane) -> None:
    """For modules whose attacks the chart's admission policies must refuse: wait until they are enforced."""
    wait_until_policies_enforced(towline_installed)

"""Integration fixtures shared by the API tests: Towline's CRDs installed in the local control plane."""

from __future__ import annotations

import pytest

from towline.devcluster.controlplane import ControlPlane
from towline.devcluster.install import install_crds


@pytest.fixture(scope="session")
def crds_installed(control_plane: ControlPlane) -> ControlPlane:
    """`crds/*.yaml` applied (server-side) and Established; the control plane, for chaining."""
    install_crds(control_plane)
    return control_plane

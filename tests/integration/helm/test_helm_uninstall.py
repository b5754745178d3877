"""`helm uninstall` leaves nothing but the CRDs and the archive's record (by design: its volume and its signing
key carry `helm.sh/resource-policy: keep`, docs/archive.md#uninstalling). Fixtures: conftest.py in this directory.
"""

from __future__ import annotations

import pytest
from tests.integration.helm.release import (
    CHART_LABELS,
    Cluster,
    kept_record,
    labelled_objects,
    on,
    uninstall,
)
from tests.integration.support import wait_for

from towline_dev.release import NAMESPACE, RELEASE

pytestmark = pytest.mark.integration


def test_helm_uninstall_leaves_nothing_but_the_crds_and_the_archives_record(installed: Cluster) -> None:
    record = kept_record()
    uninstall(installed, RELEASE, NAMESPACE)

    remaining: list[tuple[str, str]] = []

    def leftovers() -> list[tuple[str, str]] | None:
        found = [o for label in CHART_LABELS for o in labelled_objects(installed, label)]
        remaining[:] = [o for o in found if o[0] != "CustomResourceDefinition" and o not in record]
        # ReplicaSets and pods go with their Deployment through the garbage collector, a moment later.
        return None if remaining else found

    try:
        found = wait_for("everything of the release but the CRDs to be gone", leftovers, timeout=90)
    except AssertionError:
        raise AssertionError(f"left behind by helm uninstall: {remaining}") from None
    # Each CRD carries several of the chart's labels (the release manages them): one entry per CRD.
    assert sorted({name for kind, name in found if kind == "CustomResourceDefinition"}) == [
        "/approvals.towline.dev", "/clustersteptypes.towline.dev", "/steptypes.towline.dev",
        "/workflowruns.towline.dev", "/workflows.towline.dev"]
    assert {o for o in found if o in record} == record, "the archive's record is kept"
    assert on(installed, "status", RELEASE, "-n", NAMESPACE).returncode != 0

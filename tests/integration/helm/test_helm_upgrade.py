"""`helm upgrade`: a changed value rolls the operator (a new ReplicaSet; on a node, new Ready pods), and the
release then uninstalls cleanly. Fixtures: conftest.py in this directory.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.helm.release import (
    CHART_LABELS,
    Cluster,
    chart_pods,
    container_env,
    deployment,
    kept_record,
    labelled_objects,
    on,
    uninstall,
)
from tests.integration.support import wait_for

from towline_dev.release import CHART, NAMESPACE, RELEASE, wait_rolled_out

pytestmark = pytest.mark.integration


def test_helm_upgrade_with_a_changed_value_rolls_the_operator(installed: Cluster) -> None:
    before = deployment(installed)
    old_checksum = before["spec"]["template"]["metadata"]["annotations"]["towline.dev/config-checksum"]
    result = on(installed, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                "--set", "operator.logLevel=debug")
    assert result.returncode == 0, result.stdout + result.stderr
    after = deployment(installed)
    assert after["spec"]["template"]["metadata"]["annotations"]["towline.dev/config-checksum"] != old_checksum
    assert container_env(after)["TOWLINE_LOG_LEVEL"] == "debug"

    def replica_sets() -> list[dict[str, Any]] | None:
        listed = json.loads(installed.kubectl(
            "get", "replicasets", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator", "-o", "json",
        ).stdout)["items"]
        rolled = [rs for rs in listed
                  if container_env(rs).get("TOWLINE_LOG_LEVEL") == "debug"]
        return listed if rolled and len(listed) >= 2 else None

    # The Deployment controller itself starts the rollout: a new ReplicaSet with the new pod template.
    sets = wait_for("a new ReplicaSet for the changed pod template", replica_sets, timeout=60)
    hashes = {rs["metadata"]["labels"]["pod-template-hash"] for rs in sets}
    assert len(hashes) == len(sets) >= 2


def test_helm_upgrade_rolls_new_ready_pods_and_uninstall_leaves_only_crds_on_a_node(
    running_release: Cluster,
) -> None:
    cluster = running_release
    before = {p["metadata"]["name"] for p in chart_pods(cluster)}
    result = on(cluster, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                "--set", "operator.logLevel=debug")
    assert result.returncode == 0, result.stdout + result.stderr
    wait_rolled_out(cluster)

    def rolled() -> list[dict[str, Any]] | None:
        pods = chart_pods(cluster, "app.kubernetes.io/component=operator")
        # The old pods terminate after the new ones are Ready; wait until only new ones are left.
        return pods if len(pods) == 2 and not {p["metadata"]["name"] for p in pods} & before else None

    pods = wait_for("the operator's pods to be replaced", rolled, timeout=120)
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert {"name": "TOWLINE_LOG_LEVEL", "value": "debug"} in container["env"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"]), pod["status"]

    uninstall(cluster, RELEASE, NAMESPACE)
    remaining: list[tuple[str, str]] = []

    def leftovers() -> list[tuple[str, str]] | None:
        found = [o for label in CHART_LABELS for o in labelled_objects(cluster, label)]
        remaining[:] = [o for o in found if o[0] != "CustomResourceDefinition" and o not in kept_record()]
        return None if remaining or chart_pods(cluster, terminating=True) else found

    try:
        found = wait_for("everything of the release but the CRDs to be gone, pods included", leftovers, timeout=180)
    except AssertionError:
        raise AssertionError(f"left behind by helm uninstall: {remaining}") from None
    assert {o for o in found if o[0] != "CustomResourceDefinition"} == kept_record(), found

"""The CRDs through the chart (`crds.enabled`, `crds.keep`: templates/crds.yaml), on a control plane of the module's
own: `helm upgrade` upgrades them, `helm uninstall` and turning them off leave them and every Workflow, the manual
server-side apply README's "Upgrade" documents still works, and a release never takes over CRDs it does not own.

"The previous chart" is this chart with one change a later release makes to a CRD: WorkflowRun's short name
(`tlrun`) is another. `kubectl get tlrun` answers once the cluster has this chart's CRDs. Fixtures: conftest.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.helm.release import Cluster, on, uninstall
from tests.integration.support import wait_for

from towline_dev.chartcrds import TEMPLATE_PATH
from towline_dev.existing import ExistingCluster
from towline_dev.release import CHART, CRD_SELECTOR, NAMESPACE, RELEASE, adopt_crds, set_args

pytestmark = pytest.mark.integration

RUNS = "workflowruns.towline.dev"
OLD_SHORT_NAME, NEW_SHORT_NAME = "tlrunprev", "tlrun"
WORKFLOW = {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "kept", "namespace": "crd-team"},
            "spec": {"steps": [{"id": "check", "action": "data.transform",
                                "with": {"data": {"v": 1}, "fields": {"v": "data.v"}}}]}}


@pytest.fixture
def cluster(helm_cluster: Cluster, existing_cluster: ExistingCluster | None) -> Iterator[Cluster]:
    """The module's control plane without Towline's release or CRDs, before and after each test."""
    if existing_cluster is not None:
        pytest.skip("deletes Towline's CRDs, and every object in them, between its tests: a control plane of its own")
    _remove_everything(helm_cluster)
    helm_cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    helm_cluster.kubectl("create", "namespace", "crd-team", check=False)
    yield helm_cluster
    _remove_everything(helm_cluster)


def _remove_everything(cluster: Cluster) -> None:
    for release, namespace in ((RELEASE, NAMESPACE), ("other", "other-system")):
        uninstall(cluster, release, namespace)
    # Deleting a CRD waits for the API server to remove each of its objects: minutes on a loaded machine.
    cluster.kubectl("delete", "crd", "-l", CRD_SELECTOR, "--ignore-not-found", "--wait=true", timeout=400)


@pytest.fixture
def previous_chart(tmp_path: Path) -> Path:
    """This chart as a release before it: the same but for WorkflowRun's short name in its CRD template."""
    chart = tmp_path / "towline"
    shutil.copytree(CHART, chart)
    template = chart / TEMPLATE_PATH
    text = template.read_text()
    assert text.count(f"    - {NEW_SHORT_NAME}\n") == 1
    template.write_text(text.replace(f"    - {NEW_SHORT_NAME}\n", f"    - {OLD_SHORT_NAME}\n"))
    return chart


def _crd(cluster: Cluster, name: str = RUNS) -> dict[str, Any] | None:
    found = cluster.kubectl("get", "crd", name, "-o", "json", "--ignore-not-found").stdout
    return json.loads(found) if found else None


def _short_names(cluster: Cluster) -> list[str]:
    crd = _crd(cluster)
    assert crd is not None, f"the CRD {RUNS} is gone"
    names: list[str] = crd["spec"]["names"].get("shortNames") or []
    return names


def _install(cluster: Cluster, chart: Path, *values: tuple[str, str], release: str = RELEASE,
             namespace: str = NAMESPACE) -> subprocess.CompletedProcess[str]:
    return on(cluster, "install", release, str(chart), "--namespace", namespace, "--create-namespace",
              *set_args(dict(values)))


def _upgrade(cluster: Cluster, chart: Path, *values: tuple[str, str]) -> subprocess.CompletedProcess[str]:
    return on(cluster, "upgrade", RELEASE, str(chart), "-n", NAMESPACE, "--reset-then-reuse-values",
              *set_args(dict(values)))


def _established(cluster: Cluster) -> None:
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "-l", CRD_SELECTOR)


def _workflow_kept(cluster: Cluster) -> bool:
    return cluster.kubectl("get", "workflows.towline.dev", "kept", "-n", "crd-team", check=False).returncode == 0


def _ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


def test_helm_upgrade_upgrades_the_crds_and_keeps_the_workflows(cluster: Cluster, previous_chart: Path) -> None:
    _ok(_install(cluster, previous_chart))
    _established(cluster)
    assert _short_names(cluster) == [OLD_SHORT_NAME]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(WORKFLOW))

    _ok(_upgrade(cluster, CHART))
    # The API server serves the new short name once it has taken the new CRD (discovery follows a moment later).
    wait_for("the upgraded CRD's short name to be served", lambda: cluster.kubectl(
        "get", NEW_SHORT_NAME, "-n", "crd-team", check=False).returncode == 0, timeout=60)
    assert _short_names(cluster) == [NEW_SHORT_NAME]
    assert _workflow_kept(cluster)
    manifest = on(cluster, "get", "manifest", RELEASE, "-n", NAMESPACE)
    assert manifest.stdout.count("kind: CustomResourceDefinition") == 5, "the release manages the five CRDs"
    crd = _crd(cluster)
    assert crd is not None
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_turning_crds_off_keeps_them_and_the_manual_server_side_apply_upgrades_them(
    cluster: Cluster, previous_chart: Path,
) -> None:
    _ok(_install(cluster, previous_chart))
    _established(cluster)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(WORKFLOW))

    # From here the platform team applies the CRDs itself: the release lets go of them, and keeps them.
    _ok(_upgrade(cluster, CHART, ("crds.enabled", "false")))
    assert "CustomResourceDefinition" not in on(cluster, "get", "manifest", RELEASE, "-n", NAMESPACE).stdout
    assert _short_names(cluster) == [OLD_SHORT_NAME], "a release with crds.enabled=false leaves the CRDs as they are"
    assert _workflow_kept(cluster)

    # README's "Upgrade", CRDs applied by hand: the chart's CRD template, applied server-side, first.
    rendered = on(cluster, "template", RELEASE, str(CHART), "--show-only", TEMPLATE_PATH)
    _ok(rendered)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered.stdout)
    assert _short_names(cluster) == [NEW_SHORT_NAME]
    _ok(_upgrade(cluster, CHART))  # crds.enabled stays false (--reset-then-reuse-values)
    assert _workflow_kept(cluster)


def test_helm_uninstall_leaves_the_crds_and_every_workflow_unless_crds_keep_is_off(
    cluster: Cluster,
) -> None:
    _ok(_install(cluster, CHART))
    _established(cluster)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(WORKFLOW))
    uninstall(cluster, RELEASE, NAMESPACE)
    assert [name for name in (_crd(cluster, f"{plural}.towline.dev") for plural in (
        "approvals", "clustersteptypes", "steptypes", "workflowruns", "workflows")) if name is None] == []
    assert _workflow_kept(cluster), "helm uninstall took the teams' Workflows with it"

    # Without the keep policy the CRDs go with the release, and every Workflow with them: what crds.keep prevents.
    adopt_crds(cluster)
    _ok(_install(cluster, CHART, ("crds.keep", "false")))
    uninstall(cluster, RELEASE, NAMESPACE)
    wait_for("the CRDs to go with a release whose crds.keep is false", lambda: _crd(cluster) is None, timeout=120)


def test_a_release_does_not_take_over_crds_it_does_not_own_and_says_how(cluster: Cluster) -> None:
    # CRDs applied by hand (kubectl, as a checkout's crds/): the install stops before it creates anything.
    rendered = on(cluster, "template", RELEASE, str(CHART), "--show-only", TEMPLATE_PATH)
    _ok(rendered)
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=rendered.stdout)
    refused = _install(cluster, CHART)
    assert refused.returncode != 0
    assert "no Helm release manages it" in refused.stderr and "set crds.enabled=false" in refused.stderr, \
        refused.stderr
    assert f"meta.helm.sh/release-name={RELEASE}" in refused.stderr, refused.stderr
    assert on(cluster, "status", RELEASE, "-n", NAMESPACE).returncode != 0

    # The commands it names hand them to the release (which watches one namespace, leaving room for another).
    adopt_crds(cluster)
    _ok(_install(cluster, CHART, ("watchNamespaces", '["crd-team"]')))

    # A second release on the cluster leaves the CRDs to the first.
    second = _install(cluster, CHART, ("watchNamespaces", '["other-work"]'), release="other",
                      namespace="other-system")
    assert second.returncode != 0
    assert f'managed by Towline release "{RELEASE}" in namespace {NAMESPACE}' in second.stderr, second.stderr
    assert "set crds.enabled=false for this release" in second.stderr, second.stderr
    crd = _crd(cluster)
    assert crd is not None and crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE

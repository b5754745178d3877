"""The built-in roles, as the chart aggregates Towline into them, through the real API server and its
clusterrole-aggregation controller: `view` reads, `edit` writes Workflows and starts runs, and neither
registers a step type; `towline-workflow-author` is the same for those who hold no built-in role.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.support import apply, bind_role, wait_for, workflow

from towline_dev.controlplane import ControlPlane

pytestmark = pytest.mark.integration

STEP_TYPE: dict[str, Any] = {"apiVersion": "towline.dev/v1alpha1", "kind": "StepType",
                             "spec": {"image": "localhost/towline-steps/tcp-probe:dev"}}


def can(cluster: ControlPlane, user: str, verb: str, resource: str, namespace: str) -> bool:
    answer = cluster.kubectl("auth", "can-i", verb, resource, "-n", namespace, user=user, check=False)
    return answer.stdout.strip() == "yes"


def test_view_reads_edit_writes_workflows_and_runs_and_neither_registers_step_types(
    towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "view", users=("alice",))
    bind_role(cluster, ns, "edit", users=("carol",))
    # The aggregation controller folds the chart's rules into the built-in roles shortly after they exist.
    wait_for("edit to carry Towline's rules", lambda: can(cluster, "carol", "create", "workflows.towline.dev", ns))
    manifest = workflow(ns, "by-an-editor", [{"id": "a", "action": "data.transform", "with": {"fields": {"x": "1"}}}])
    assert apply(cluster, manifest, user="carol", check=False).returncode == 0
    assert can(cluster, "carol", "create", "workflowruns.towline.dev", ns)
    assert can(cluster, "alice", "list", "workflows.towline.dev", ns)
    assert can(cluster, "alice", "watch", "workflowruns.towline.dev", ns)
    refused = apply(cluster, {**manifest, "metadata": {"name": "by-a-viewer", "namespace": ns}}, user="alice",
                    check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
    for user in ("alice", "carol"):
        attempt = apply(cluster, {**STEP_TYPE, "metadata": {"name": f"by-{user}", "namespace": ns}}, user=user,
                        check=False)
        assert attempt.returncode != 0 and "forbidden" in attempt.stderr, attempt.stderr
    assert not can(cluster, "carol", "patch", "approvals.towline.dev", ns)


def test_the_workflow_author_role_writes_workflows_and_starts_runs_only(
    towline_installed: ControlPlane, namespace: str
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "towline-workflow-author", users=("bob",))
    manifest = workflow(ns, "by-an-author", [{"id": "a", "action": "data.transform", "with": {"fields": {"x": "1"}}}])
    assert apply(cluster, manifest, user="bob", check=False).returncode == 0
    assert can(cluster, "bob", "create", "workflowruns.towline.dev", ns)
    assert not can(cluster, "bob", "create", "steptypes.towline.dev", ns)
    assert not can(cluster, "bob", "patch", "approvals.towline.dev", ns)
    assert not can(cluster, "bob", "get", "secrets", ns)

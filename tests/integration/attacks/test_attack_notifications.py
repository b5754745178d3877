"""Attacks on a gate's notification Jobs by someone with the built-in `edit` role in the namespace.

A notification Job is a step Job (towline-step-* name, labelled for the run,
controlled by it): an editor can neither pre-empt the one the operator will
create next (which the operator would then adopt, announcing what she wrote),
nor rename, relabel or re-point the one it made. The operator still creates
the next one itself once the gate is decided.
"""

from __future__ import annotations

import pytest
from tests.integration.attacks.attack_support import (
    create_as,
    decide,
    gate_approval,
    gated_workflow,
    install,
    jobs_of,
    patch_as,
    refused,
    run_manifest,
)
from tests.integration.attacks.step_objects import OPERATOR_ONLY, OWNERSHIP, SPEC, job_manifest, owner
from tests.integration.support import bind_role, get, wait_for

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

LABEL = "towline.dev/notification"


def test_an_editor_cannot_forge_pre_empt_or_change_a_notification_job(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str,
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    bind_role(cluster, ns, "towline-approver", users=("bob",))
    workflow = gated_workflow(ns)
    workflow["spec"]["approvalNotifications"] = [{
        "events": ["opened", "decided"], "action": "http.request", "with": {"url": "https://hooks.example.com/approvals"},
    }]
    install(cluster, workflow)
    assert create_as(cluster, "admin", run_manifest(ns, "gated", "notified", "admin")).returncode == 0
    approval = gate_approval(cluster, ns, "notified")
    run = get(cluster, "workflowruns.towline.dev", "notified", ns)
    assert run is not None
    (opened,) = wait_for("the opened notification Job", lambda: jobs_of(cluster, ns, "notified", "review"))
    assert opened["metadata"]["labels"][LABEL] == "opened-0"
    decided_name = opened["metadata"]["name"].replace("-opened", "-decided")

    # Pre-empting the next notification: labelled for the run and owned by it, or just squatting its name.
    labels = {**opened["metadata"]["labels"], LABEL: "decided-0"}
    pod_labels = {"towline.dev/run": "notified", "towline.dev/step-pod": "true", LABEL: "decided-0"}
    refused(create_as(cluster, "carol", job_manifest(ns, decided_name, labels, [owner(run)], pod_labels)),
            OPERATOR_ONLY)
    refused(create_as(cluster, "carol", job_manifest(ns, decided_name, {}, [])), OPERATOR_ONLY)

    # The operator's own notification Job: its event label, owner and spec stay what the operator wrote.
    name = opened["metadata"]["name"]
    refused(patch_as(cluster, "carol", "job", name, ns, {"metadata": {"labels": {LABEL: "decided-0"}}}), OWNERSHIP)
    refused(patch_as(cluster, "carol", "job", name, ns, {"metadata": {"ownerReferences": []}}), OWNERSHIP)
    refused(patch_as(cluster, "carol", "job", name, ns, {"spec": {"activeDeadlineSeconds": 7}}), SPEC)

    assert decide(cluster, ns, approval, "bob").returncode == 0
    jobs = wait_for("the decided notification Job", lambda: [
        job for job in jobs_of(cluster, ns, "notified", "review") if job["metadata"]["name"] == decided_name])
    (decided,) = jobs
    controller = next(o for o in decided["metadata"]["ownerReferences"] if o.get("controller"))
    assert controller["uid"] == run["metadata"]["uid"], "the operator made it, for this run"
    assert decided["metadata"]["labels"][LABEL] == "decided-0"

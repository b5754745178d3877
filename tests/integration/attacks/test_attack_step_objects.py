"""Attacks on a run's step Jobs and pods by someone with the built-in `edit` role in the namespace (who may
create and change Jobs and pods there): a run trusts the Jobs and pods labelled for it, so forging or relabelling
one is refused by the API server (admission policy towline-step-objects), while Jobs and pods of her own, and
changes that leave a step object's ownership alone, still work."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.attacks.attack_support import (
    create_as,
    echo_workflow,
    install,
    jobs_of,
    patch_as,
    refused,
    run_manifest,
)
from tests.integration.attacks.step_objects import (
    OPERATOR_ONLY,
    OWNERSHIP,
    POD_CREATORS_ONLY,
    SPEC,
    job_manifest,
    owner,
    pod_manifest,
)
from tests.integration.support import bind_role, list_objects, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]


def finished_run(cluster: ControlPlane, ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run that Succeeded (its Job's pod was created by the operator under the policy) and its Job."""
    install(cluster, echo_workflow(ns))
    assert create_as(cluster, "admin", run_manifest(ns, "echo", "real-run", "admin")).returncode == 0
    run = wait_for_phase(cluster, ns, "real-run", {"Succeeded", "Failed"})
    assert run["status"]["phase"] == "Succeeded", run["status"]
    (job,) = jobs_of(cluster, ns, "real-run")
    return run, job



def test_an_editor_cannot_forge_or_relabel_a_runs_jobs_and_pods(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str,
) -> None:
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    run, job = finished_run(cluster, ns)
    labels = dict(job["metadata"]["labels"])

    # A forged Job for the run (its labels, controlled by the run) and a forged pod for its real Job.
    refused(create_as(cluster, "carol", job_manifest(ns, "forged-job", labels, [owner(run)])), OPERATOR_ONLY)
    pod_labels = {"towline.dev/run": "real-run", "job-name": job["metadata"]["name"]}
    forged_pod = pod_manifest(ns, "forged-pod", pod_labels, [owner(job)])
    refused(create_as(cluster, "carol", forged_pod, "--dry-run=server"), POD_CREATORS_ONLY)

    # Her own Job, unlabelled, is hers to make; labelling it for the run afterwards is not.
    assert create_as(cluster, "carol", job_manifest(ns, "carols-job", {}, [])).returncode == 0
    refused(patch_as(cluster, "carol", "job", "carols-job", ns, {"metadata": {"labels": labels}}), OWNERSHIP)
    refused(patch_as(cluster, "carol", "job", "carols-job", ns, {"metadata": {"labels": {"towline.dev/run": "x"},
                                                                              "ownerReferences": [owner(run)]}}),
            OWNERSHIP)

    # The real Job: its step, attempt, annotations and owner stay what the operator wrote.
    name = job["metadata"]["name"]
    for metadata in (
        {"labels": {"towline.dev/attempt": "9"}},
        {"labels": {"towline.dev/step": "other"}},
        {"annotations": {key: "other" for key in job["metadata"].get("annotations", {})
                         if key.startswith("towline.dev/")} or {"towline.dev/step-id": "other"}},
        {"ownerReferences": []},
    ):
        refused(patch_as(cluster, "carol", "job", name, ns, {"metadata": metadata}), OWNERSHIP)
    after = json.loads(cluster.kubectl("get", "job", name, "-n", ns, "-o", "json").stdout)
    for field in ("labels", "ownerReferences"):
        assert after["metadata"].get(field) == job["metadata"].get(field)
    # A change that leaves ownership alone is still hers to make: the policy is not a blanket lock.
    assert patch_as(cluster, "carol", "job", name, ns, {"metadata": {"labels": {"team": "a"}}}).returncode == 0


def test_an_editor_cannot_make_step_objects_by_pod_template_or_reserved_name(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str,
) -> None:
    """The Job controller copies a Job's pod template labels onto its pods: an unlabelled Job whose template says
    towline.dev/run=<victim> would get pods labelled for the victim's run. And a step pod's name is all that exec
    or attach requests show, so the step-name prefix is the operator's alone."""
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    _, job = finished_run(cluster, ns)
    victim = {"towline.dev/run": "real-run", "towline.dev/step-pod": "true"}

    refused(create_as(cluster, "carol", job_manifest(ns, "template-labelled", {}, [], victim)), OPERATOR_ONLY)
    refused(create_as(cluster, "carol", job_manifest(ns, "towline-step-mine-1", {}, [])), OPERATOR_ONLY)
    refused(create_as(cluster, "carol", pod_manifest(ns, "towline-step-mine-1-abcde", {}, []), "--dry-run=server"),
            POD_CREATORS_ONLY)
    # A suspended Job's template labels may change (Kubernetes allows it before the Job starts): not to a run's.
    assert create_as(cluster, "carol", job_manifest(ns, "later", {}, [], {"app": "mine"})).returncode == 0
    refused(patch_as(cluster, "carol", "job", "later", ns, {"spec": {"template": {"metadata": {"labels": victim}}}}),
            OWNERSHIP)

    # A patch that drops the run label from a step Job is still judged as the step Job it was.
    name = job["metadata"]["name"]
    refused(patch_as(cluster, "carol", "job", name, ns, {"metadata": {"labels": {"towline.dev/run": None}}}),
            OWNERSHIP)
    refused(patch_as(cluster, "carol", "job", name, ns, {"spec": {"activeDeadlineSeconds": 1}}), SPEC)
    assert name.startswith("towline-step-"), "step Jobs carry the reserved prefix"


def test_an_editor_cannot_borrow_a_runs_shared_egress_policy(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str,
) -> None:
    """The run's steps of one egress share a policy that selects pods by the run and the digest of what it opens
    (towline.k8s.egresspolicies). A pod of carol's own with those labels would be let out as the steps are: it is
    refused; one with the digest alone is hers to make, and no step policy selects it."""
    cluster, ns = towline_installed, namespace
    bind_role(cluster, ns, "edit", users=("carol",))
    _, job = finished_run(cluster, ns)
    template = job["spec"]["template"]["metadata"]["labels"]
    (policy,) = list_objects(cluster, "networkpolicies", ns, "towline.dev/run=real-run,towline.dev/egress")
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= template.items() and set(selected) == {"towline.dev/run", "towline.dev/egress"}

    refused(create_as(cluster, "carol", pod_manifest(ns, "borrowed", dict(selected), []), "--dry-run=server"),
            POD_CREATORS_ONLY)
    digest_only = {"towline.dev/egress": selected["towline.dev/egress"]}
    assert create_as(cluster, "carol", pod_manifest(ns, "digest-only", digest_only, []),
                     "--dry-run=server").returncode == 0
    policies = list_objects(cluster, "networkpolicies", ns)
    assert not [p["metadata"]["name"] for p in policies
                if p["spec"]["podSelector"].get("matchLabels", {}).items() <= digest_only.items()
                and not p["spec"]["podSelector"].get("matchExpressions")], "a policy selects the digest-only pod"
    # Nor may she give the run's real step pod another egress digest (a pod's towline.dev/ labels are the operator's).
    refused(patch_as(cluster, "carol", "pod", job["metadata"]["name"], ns,
                     {"metadata": {"labels": {"towline.dev/egress": "0" * 20}}}), OWNERSHIP)

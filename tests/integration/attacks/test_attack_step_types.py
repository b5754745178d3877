"""Who may register which step types, and what a registered type can never do to a run or a Secret.

- carol with the built-in `edit` role may not register a type at all (the chart's role for it is separate);
- alice, a step-type author, may not register (or change a type to) an image outside
  stepTypes.allowedImagePrefixes (a prefix ends at a `/`), nor any ClusterStepType;
- a type changed under a run that already started does not change what that run executes;
- a step binding a slot its type does not declare is refused before anything runs.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from tests.integration.attacks.attack_support import (
    create_as,
    decide,
    gate_approval,
    install,
    jobs_of,
    patch_as,
    refused,
)
from tests.integration.support import apply, bind_role, get, start_run, step_status, wait_for, wait_for_phase

from towline_dev import REPO_ROOT
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

EXAMPLE = REPO_ROOT / "examples" / "step-types" / "tcp-probe-go" / "steptype.yaml"
PROBE_IMAGE = "localhost/towline-steps/tcp-probe:dev"
OTHER_ALLOWED_IMAGE = "localhost/towline-steps/greeter:dev"
STEP_TYPES = "steptypes.towline.dev"


def probe_type(namespace: str, **spec: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"].update(spec)
    return manifest


@pytest.fixture
def authors(towline_installed: ControlPlane, team_namespace: str) -> str:
    """carol holds `edit`; alice holds `edit` and the chart's towline-step-type-author role."""
    bind_role(towline_installed, team_namespace, "edit", users=("carol", "alice"))
    bind_role(towline_installed, team_namespace, "towline-step-type-author", users=("alice",))
    return team_namespace


def test_the_edit_role_cannot_register_a_step_type(towline_installed: ControlPlane, authors: str) -> None:
    refused(create_as(towline_installed, "carol", probe_type(authors)), "forbidden", "steptypes")


def test_an_author_cannot_register_or_switch_to_an_image_outside_the_allowed_prefixes(
    towline_installed: ControlPlane, authors: str
) -> None:
    cluster, ns = towline_installed, authors
    message = refused(create_as(cluster, "alice", probe_type(ns, image="docker.io/attacker/steal:latest")),
                      "towline-step-type-images", "is not allowed for step types")
    assert "localhost/towline-steps" in message, message
    assert create_as(cluster, "alice", probe_type(ns)).returncode == 0
    refused(patch_as(cluster, "alice", STEP_TYPES, "tcp-probe", ns,
                     {"spec": {"image": "localhost/towline-stepx/evil:1"}}), "is not allowed for step types")
    assert (get(cluster, STEP_TYPES, "tcp-probe", ns) or {})["spec"]["image"] == PROBE_IMAGE


NEIGHBOURS = {
    "beside-the-prefix": "localhost/towline-steps-evil/steal:1",
    "a-registry-named-like-the-prefix": "localhost/towline-steps.evil.example/steal:1",
}


@pytest.mark.parametrize("image", list(NEIGHBOURS))
def test_an_allowed_prefix_ends_at_a_slash(towline_installed: ControlPlane, authors: str, image: str) -> None:
    """The tests' chart allows `localhost/towline-steps`, written without its `/`: it still covers only images
    under `localhost/towline-steps/`."""
    refused(create_as(towline_installed, "alice", probe_type(authors, image=NEIGHBOURS[image])),
            "towline-step-type-images", "is not allowed for step types")


def test_an_author_cannot_register_a_cluster_step_type(towline_installed: ControlPlane, authors: str) -> None:
    manifest = probe_type(authors)
    manifest["kind"] = "ClusterStepType"
    del manifest["metadata"]["namespace"]
    refused(create_as(towline_installed, "alice", manifest), "forbidden", "clustersteptypes")


def test_a_type_changed_under_a_started_run_does_not_change_what_the_run_executes(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, authors: str
) -> None:
    cluster, ns = towline_installed, authors
    apply(cluster, probe_type(ns))
    install(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "typed", "namespace": ns},
        "spec": {"steps": [
            {"id": "review", "approval": {"message": "go?", "approvers": {"users": ["bob"]}}},
            {"id": "probe", "needs": ["review"], "action": "steptype/tcp-probe", "with": {"message": "snap"}},
        ]},
    })
    run = start_run(cluster, ns, "typed")
    approval = gate_approval(cluster, ns, run)  # the run started: its snapshot holds the type as it was
    # The author swaps the type for another allowed image whose entrypoint writes its own result.
    assert patch_as(cluster, "alice", STEP_TYPES, "tcp-probe", ns, {"spec": {"image": OTHER_ALLOWED_IMAGE}}
                    ).returncode == 0
    assert decide(cluster, ns, approval, "bob").returncode == 0
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "probe")["output"]["message"] == "snap"
    images = {c["image"] for job in jobs_of(cluster, ns, run, "probe")
              for c in job["spec"]["template"]["spec"]["containers"]}
    assert images == {PROBE_IMAGE}
    assert done["status"]["workflowSpec"]["stepTypes"]["steptype/tcp-probe"]["spec"]["image"] == PROBE_IMAGE


def test_a_step_binding_a_slot_its_type_does_not_declare_is_refused_before_anything_runs(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, authors: str
) -> None:
    cluster, ns = towline_installed, authors
    apply(cluster, probe_type(ns))
    apply(cluster, {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "extra", "namespace": ns},
        "spec": {"steps": [{"id": "probe", "action": "steptype/tcp-probe", "with": {"message": "m"},
                            "allowHosts": ["api.example.com"],
                            "credentials": {"api": "probe-api", "kubeconfig": "cluster-admin-kubeconfig"}}]},
    })

    def verdict() -> list[dict[str, Any]] | None:
        found = get(cluster, "workflows.towline.dev", "extra", ns) or {}
        errors = (found.get("status") or {}).get("validationErrors")
        return list(errors) if errors else None

    errors = wait_for("the Workflow to be refused", verdict)
    assert [e["field"] for e in errors] == ["spec.steps[0].credentials.kubeconfig"], errors
    assert "steptype/tcp-probe has no credential slot 'kubeconfig'" in errors[0]["message"]

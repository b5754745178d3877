"""A compromised operator of a release that pins the runner by digest (`runner.digest`): the chart's
operator-jobs policy admits step Jobs of exactly that digest, so the operator cannot swap in other bytes
published under the same repository and tag (a re-pushed tag, a registry it was tricked into trusting).

The release is rendered for this test alone (its own name and release namespace, so its own operator
identity), so its policy restricts that identity only and the other tests' operators are untouched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from tests.integration.attacks.attack_support import refused
from tests.integration.attacks.test_attack_operator_jobs import IMAGES, step_job
from tests.integration.helmsupport import helm
from tests.integration.support import wait_for

from towline_dev.controlplane import ControlPlane
from towline_dev.release import CHART, set_args
from towline_dev.versions import KUBERNETES_VERSION

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

REPOSITORY = "registry.example.com/platform/towline"
PINNED = "sha256:" + "2" * 64
OTHER = "sha256:" + "3" * 64
RUNNER = f"{REPOSITORY}-runner:0.1.0"
ACCOUNT = "pinned-operator"


@pytest.fixture
def pinned_release(towline_installed: ControlPlane, namespace: str) -> Iterator[str]:
    """The operator-jobs policy and binding of a release with `runner.digest`; its operator's user (the
    ServiceAccount of a release namespace of its own, which no other test uses) may create Jobs in
    `namespace` by RBAC. Yields that user."""
    # Names fit 63 characters: the release is named by a digest of the namespace, unique like it.
    cluster, release = towline_installed, f"pin-{hashlib.sha256(namespace.encode()).hexdigest()[:10]}"
    home = f"{release}-system"  # the release's namespace: the policy refuses everything in it
    result = helm(cluster.binaries, "template", release, str(CHART), "--namespace", home,
                  "--kube-version", KUBERNETES_VERSION, *set_args({
                      "image.repository": REPOSITORY, "image.tag": "0.1.0", "runner.digest": PINNED,
                      "serviceAccount.name": ACCOUNT}))
    assert result.returncode == 0, result.stderr
    policy_name = f"{release}-towline-operator-jobs"
    objects = [d for d in yaml.safe_load_all(result.stdout) if d and d["metadata"]["name"] == policy_name
               and d["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
    assert len(objects) == 2, [d["metadata"]["name"] for d in yaml.safe_load_all(result.stdout) if d]
    user = f"system:serviceaccount:{home}:{ACCOUNT}"
    rbac: list[dict[str, Any]] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": ACCOUNT, "namespace": namespace},
         "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": ACCOUNT, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": home}]},
    ]
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": [*rbac, *objects]})
    cluster.kubectl("apply", "-f", "-", stdin=manifest)
    try:
        yield user
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", stdin=manifest, check=False)


def runner_job(namespace: str, image: str) -> str:
    job = step_job(namespace)
    for container in job["spec"]["template"]["spec"]["containers"]:
        container["image"] = image
    return json.dumps(job)


def test_a_pinned_runner_admits_only_its_digest(
    towline_installed: ControlPlane, namespace: str, pinned_release: str
) -> None:
    cluster, user = towline_installed, pinned_release

    def create(image: str) -> Any:
        return cluster.kubectl("create", "--dry-run=server", "--as", user, "-f", "-",
                               stdin=runner_job(namespace, image), check=False)

    # The API server enforces a new policy a moment after it is created: the swap is refused once it does.
    wait_for("the pinned release's policy to be enforced", lambda: create(f"{RUNNER}@{OTHER}").returncode != 0)
    for image in (f"{RUNNER}@{OTHER}", RUNNER, f"{REPOSITORY}-runner:0.2.0@{PINNED}", f"{REPOSITORY}-runner@{PINNED}"):
        refused(create(image), IMAGES)
    admitted = create(f"{RUNNER}@{PINNED}")
    assert admitted.returncode == 0, admitted.stderr

"""`TOWLINE_TEST_KUBECONFIG`: an existing cluster in the place of the local control plane.

Proved against the local control plane itself, reached only through a kubeconfig
holding nothing but its admin: the people the tests act as must arrive at the API
server as themselves, with their groups, through kubectl and the client library
alike, and RBAC must still apply to them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from towline_dev.clients import clients_from_kubeconfig
from towline_dev.controlplane import ControlPlane
from towline_dev.existing import ExistingCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def existing(control_plane: ControlPlane, tmp_path: Path) -> ExistingCluster:
    admin_only = control_plane.kubectl("config", "view", "--raw", "--flatten", "--minify",
                                       "--context", "admin").stdout
    source = tmp_path / "admin.kubeconfig"
    source.write_text(admin_only)
    assert "alice" not in admin_only and "bob" not in admin_only
    return ExistingCluster(control_plane.binaries, source).start()


def test_kubectl_acts_as_each_person_with_their_groups(existing: ExistingCluster) -> None:
    review = json.loads(existing.kubectl("auth", "whoami", "-o", "json", user="bob").stdout)
    assert review["status"]["userInfo"]["username"] == "bob"
    assert {"team-b", "approvers"} <= set(review["status"]["userInfo"]["groups"])
    refused = existing.kubectl("get", "secrets", "-n", "kube-system", user="bob", check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    assert existing.kubectl("get", "secrets", "-n", "kube-system").returncode == 0


def test_client_library_acts_as_each_person_with_their_groups(existing: ExistingCluster) -> None:
    clients = clients_from_kubeconfig(existing.kubeconfig, context="bob")
    try:
        review = client.AuthenticationV1Api(clients.api_client).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert review.status.user_info.username == "bob"
        assert {"team-b", "approvers"} <= set(review.status.user_info.groups)
        with pytest.raises(ApiException) as refused:
            clients.core.list_namespaced_secret("kube-system")
        assert refused.value.status == 403
    finally:
        clients.close()


def test_a_kubeconfig_that_cannot_impersonate_is_refused_with_the_reason(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    carol_only = control_plane.kubectl("config", "view", "--raw", "--flatten", "--minify",
                                       "--context", "carol").stdout
    source = tmp_path / "carol.kubeconfig"
    source.write_text(carol_only)
    with pytest.raises(Exception, match="may not impersonate users"):
        ExistingCluster(control_plane.binaries, source).start()

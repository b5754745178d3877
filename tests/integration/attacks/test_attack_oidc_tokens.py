"""ID tokens at the API server: it takes the test provider's tokens for the web view's client as the person they
name, under the `oidc:` prefix, and nothing else that looks like one.

The attackers: someone with a key of their own who writes a token for bob (the provider's key id in its header);
someone who runs another issuer; an app registered at the same provider for another client, whose users' tokens
would let it act as them; someone holding a token past its expiry; and the provider itself, whose `sub` may name
a user of the cluster's own (`bob` of the static tokens, whose RoleBindings must not apply). Then the four-eyes
rule with real ID tokens: carol, who started the run, cannot approve it, and bob's decision is recorded as the API
server saw him.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from tests.integration.attacks.attack_support import gate_approval, install, refused, run_manifest
from tests.integration.oidcsupport import (
    BOB,
    CAROL,
    forged_token,
    fresh_claims,
    grant_oidc_people,
    issuer_keys,
    kubectl_with_token,
    token_claims,
    token_header,
    whoami,
)
from tests.integration.support import bind_role, get, wait_for, wait_for_phase

from towline_dev.controlplane import ControlPlane
from towline_dev.idp.flow import sign_in
from towline_dev.idp.issuer import TEST_REDIRECT_URI
from towline_dev.idp.provider import IdentityProvider, OAuthClient
from towline_dev.install import OperatorProcess
from towline_dev.node.realnode import NodeCluster

pytestmark = pytest.mark.integration


def plane(cluster: NodeCluster) -> ControlPlane:
    assert cluster.plane is not None
    return cluster.plane


def test_a_token_for_bob_signed_by_another_key_is_refused(
    real_node: NodeCluster, identity_provider: IdentityProvider, web_view_client: OAuthClient
) -> None:
    genuine = sign_in(identity_provider, web_view_client, "bob").id_token
    assert whoami(plane(real_node), genuine) is not None, "bob's own token is taken"
    header = token_header(genuine)
    assert header["kid"] in issuer_keys(identity_provider)
    # The same header (the issuer's key id) and claims, issued now: only the signature is the attacker's.
    forged = forged_token(fresh_claims(token_claims(genuine)), header)
    assert whoami(plane(real_node), forged) is None


def test_a_token_of_another_issuer_is_refused(
    real_node: NodeCluster, identity_provider: IdentityProvider, web_view_client: OAuthClient
) -> None:
    genuine = sign_in(identity_provider, web_view_client, "bob").id_token
    for issuer in ("https://198.51.100.211", f"{identity_provider.issuer}/", "http://198.51.100.210"):
        forged = forged_token(fresh_claims(token_claims(genuine), iss=issuer), {"kid": "attacker", "typ": "JWT"})
        assert whoami(plane(real_node), forged) is None, issuer


def test_a_token_the_provider_made_for_another_client_is_refused(
    real_node: NodeCluster, identity_provider: IdentityProvider, web_view_client: OAuthClient
) -> None:
    other_app = identity_provider.register_client([TEST_REDIRECT_URI], client_id="another-app")
    token = sign_in(identity_provider, other_app, "bob").id_token
    assert token_claims(token)["aud"] == ["another-app"]
    assert token_claims(token)["iss"] == identity_provider.issuer
    assert whoami(plane(real_node), token) is None
    # And the web view's client, at the same provider, for the same person, is taken.
    assert whoami(plane(real_node), sign_in(identity_provider, web_view_client, "bob").id_token) is not None


@pytest.mark.exclusive  # shortens the shared client's ID token lifespan for a moment: no other sign-in may happen
def test_an_expired_token_is_refused(
    real_node: NodeCluster, identity_provider: IdentityProvider, web_view_client: OAuthClient
) -> None:
    identity_provider.register_client([TEST_REDIRECT_URI], id_token_lifespan="20s")
    try:
        token = sign_in(identity_provider, web_view_client, "bob").id_token
    finally:
        identity_provider.register_client([TEST_REDIRECT_URI], id_token_lifespan="1h")
    claims = token_claims(token)
    assert claims["exp"] - claims["iat"] == 20
    assert whoami(plane(real_node), token) is not None, "taken while it is valid"
    wait_for("the API server to refuse bob's token once it expired", lambda: whoami(plane(real_node), token) is None,
             90, interval=1)


def test_the_provider_cannot_name_a_user_of_the_clusters_own(
    real_node: NodeCluster, identity_provider: IdentityProvider, web_view_client: OAuthClient, namespace: str
) -> None:
    cluster = plane(real_node)
    # `bob` (the static-token user) may read Secrets here; a token whose `sub` is bob is someone else: oidc:bob.
    bind_role(cluster, namespace, "admin", users=("bob",))
    assert cluster.kubectl("auth", "can-i", "list", "secrets", "-n", namespace, user="bob").stdout.strip() == "yes"
    token = sign_in(identity_provider, web_view_client, "bob").id_token
    answer = kubectl_with_token(cluster, token, "auth", "can-i", "list", "secrets", "-n", namespace)
    assert answer.stdout.strip() == "no", answer
    user = whoami(cluster, token)
    assert user is not None and user["username"] == BOB
    assert not {"approvers", "team-b", "system:masters"} & set(user["groups"])


@pytest.mark.usefixtures("policies_enforced")
def test_bobs_token_approves_and_carols_cannot_decide_her_own_run(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, namespace: str,
    identity_provider: IdentityProvider, web_view_client: OAuthClient,
) -> None:
    del towline_operator
    cluster, ns = towline_installed, namespace
    grant_oidc_people(cluster, ns)
    workflow = {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "gated", "namespace": ns},
        "spec": {"steps": [
            {"id": "review", "approval": {"message": "ship?", "approvers": {"users": [BOB, CAROL]},
                                          "fourEyes": True, "expiresAfter": "10m"}},
            {"id": "ship", "needs": ["review"], "action": "data.transform", "with": {"fields": {"x": "1"}}},
        ]},
    }
    install(cluster, workflow)
    bob, carol = (sign_in(identity_provider, web_view_client, name).id_token for name in ("bob", "carol"))
    created = kubectl_with_token(cluster, carol, "create", "-f", "-",
                                 stdin=json.dumps(run_manifest(ns, "gated", "run-1", CAROL)))
    assert created.returncode == 0, created.stderr
    approval = gate_approval(cluster, ns, "run-1")

    def decide(token: str, user: str) -> subprocess.CompletedProcess[str]:
        patch = {"spec": {"decision": "Approved", "decidedBy": user}}
        return kubectl_with_token(cluster, token, "patch", "approval", approval, "-n", ns, "--type", "merge",
                                  "-p", json.dumps(patch))

    refused(decide(carol, CAROL), "four-eyes approval: oidc:carol started this run and cannot approve it")
    # bob's name without the prefix is not who the API server saw.
    refused(decide(bob, "bob"), "spec.decidedBy must be your own username", '"decidedBy":"oidc:bob"')
    accepted = decide(bob, BOB)
    assert accepted.returncode == 0, accepted.stderr
    decided = get(cluster, "approvals.towline.dev", approval, ns)
    assert decided is not None and decided["spec"]["decidedBy"] == BOB == "oidc:bob"
    wait_for_phase(cluster, ns, "run-1", {"Succeeded"})

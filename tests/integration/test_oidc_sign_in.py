"""Signing in at the tests' OpenID Connect provider, and the API server taking the ID token for that person.

The provider is ORY Hydra with the login app (towline_dev.idp), on a test host address; the control plane's API
server trusts its ID tokens for the web view's client (`--authentication-config`). Every token here comes through
the login form, as a browser gets it: the authorization-code flow with PKCE.
"""

from __future__ import annotations

import pytest
from tests.integration.oidcsupport import BOB, whoami
from tests.integration.support import wait_for

from towline_dev.browser import headless_chromium
from towline_dev.controlplane import ControlPlane
from towline_dev.idp.browser import fill_login_form
from towline_dev.idp.flow import SignInRefused, authorization_request, redeem, sign_in
from towline_dev.idp.issuer import ISSUER_URL, TEST_REDIRECT_URI, WEB_VIEW_CLIENT_ID
from towline_dev.idp.provider import IdentityProvider, OAuthClient
from towline_dev.node.realnode import NodeCluster

pytestmark = pytest.mark.integration


def plane(cluster: NodeCluster) -> ControlPlane:
    """The node's control plane: these tests need no images, so not `control_plane`, which loads them."""
    assert cluster.plane is not None
    return cluster.plane


def test_bobs_id_token_is_bob_with_his_groups_at_the_api_server(
    real_node: NodeCluster, identity_provider: IdentityProvider, web_view_client: OAuthClient
) -> None:
    tokens = sign_in(identity_provider, web_view_client, "bob")
    claims = tokens.claims()
    assert (claims["iss"], claims["aud"], claims["sub"]) == (ISSUER_URL, [WEB_VIEW_CLIENT_ID], "bob")
    user = whoami(plane(real_node), tokens.id_token)
    assert user is not None, "the API server refused bob's ID token"
    assert user["username"] == BOB == "oidc:bob"
    assert sorted(user["groups"]) == ["oidc:approvers", "oidc:team-b", "system:authenticated"]


def test_a_wrong_password_at_the_login_app_gets_no_code(
    identity_provider: IdentityProvider, web_view_client: OAuthClient
) -> None:
    with pytest.raises(SignInRefused) as refused:
        sign_in(identity_provider, web_view_client, "bob", "not-bobs-password")
    assert refused.value.status == 401
    assert "Wrong user name or password" in refused.value.page
    with pytest.raises(SignInRefused) as unknown:
        sign_in(identity_provider, web_view_client, "mallory", "any")
    assert unknown.value.status == 401


def test_chromium_signs_bob_in_at_the_login_form(
    real_node: NodeCluster, identity_provider: IdentityProvider, web_view_client: OAuthClient
) -> None:
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - only the browser tests need selenium

    authorization = authorization_request(identity_provider, web_view_client)
    with headless_chromium(print, arguments=identity_provider.chromium_arguments()) as driver:
        driver.get(authorization.url)
        wait_for("the login app's form", lambda: driver.find_elements(By.ID, "username"), 30)
        fill_login_form(driver, "bob", "not-bobs-password")
        wait_for("the refusal", lambda: driver.find_elements(By.ID, "notice"), 30)
        assert "Wrong user name or password" in driver.find_element(By.ID, "notice").text
        assert not driver.current_url.startswith(TEST_REDIRECT_URI)
        fill_login_form(driver, "bob", identity_provider.password("bob"))
        wait_for("the provider to send the browser back with a code",
                 lambda: driver.current_url.startswith(TEST_REDIRECT_URI), 30, explain=lambda: driver.current_url)
        callback = driver.current_url
    tokens = redeem(identity_provider, web_view_client, authorization, callback)
    user = whoami(plane(real_node), tokens.id_token)
    assert user is not None and user["username"] == BOB

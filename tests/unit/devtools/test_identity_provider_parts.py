"""The tests' identity provider, its parts that need no process: Hydra's wrapper module, the API server's trust,
the login form, and the PKCE pair."""

from __future__ import annotations

import base64
import hashlib

from towline_dev.idp.flow import pkce_pair
from towline_dev.idp.hydra import module_replaces
from towline_dev.idp.issuer import ISSUER_URL, PEOPLE, WEB_VIEW_CLIENT_ID, authentication_config, person
from towline_dev.idp.loginapp import login_page

HYDRA_GOMOD = """module github.com/ory/hydra/v2

go 1.22

replace github.com/ory/hydra-client-go/v2 => ./internal/httpclient

replace github.com/gobuffalo/pop/v6 => github.com/ory/pop/v6 v6.2.1-0.20241121111754-e5dfc0f3344b

replace (
\tgithub.com/example/a => github.com/example/b v1.2.3 // a fork
\tgithub.com/example/c => ../c
)

require github.com/ory/x v0.0.675
"""


def test_the_wrapper_repeats_the_replaces_that_name_modules_and_leaves_directories_out() -> None:
    assert module_replaces(HYDRA_GOMOD) == {
        "github.com/gobuffalo/pop/v6": "github.com/ory/pop/v6 v6.2.1-0.20241121111754-e5dfc0f3344b",
        "github.com/example/a": "github.com/example/b v1.2.3",
    }


def test_the_api_server_trusts_the_issuer_for_the_web_views_client_only_with_prefixed_names() -> None:
    config = authentication_config("-----BEGIN CERTIFICATE-----\n...\n")
    (jwt,) = config["jwt"]
    assert config["apiVersion"] == "apiserver.config.k8s.io/v1"
    assert jwt["issuer"]["url"] == ISSUER_URL and jwt["issuer"]["audiences"] == [WEB_VIEW_CLIENT_ID]
    assert jwt["issuer"]["certificateAuthority"].startswith("-----BEGIN CERTIFICATE-----")
    assert jwt["claimMappings"]["username"] == {"claim": "sub", "prefix": "oidc:"}
    assert jwt["claimMappings"]["groups"] == {"claim": "groups", "prefix": "oidc:"}


def test_the_people_are_named_at_the_api_server_with_the_prefix() -> None:
    assert [p.name for p in PEOPLE] == ["alice", "bob", "carol", "dave"]
    assert person("bob").username == "oidc:bob"
    assert person("bob").kubernetes_groups == ("oidc:team-b", "oidc:approvers")


def test_the_login_form_escapes_what_it_echoes() -> None:
    page = login_page('c"><script>', user="<b>bob</b>", notice="Wrong <i>")
    assert "<script>" not in page and "<b>bob" not in page and "<i>" not in page
    assert 'name="login_challenge" value="c&quot;&gt;&lt;script&gt;"' in page


def test_the_pkce_challenge_is_the_verifiers_s256() -> None:
    verifier, challenge = pkce_pair()
    assert 43 <= len(verifier) <= 128
    expected = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert challenge == expected

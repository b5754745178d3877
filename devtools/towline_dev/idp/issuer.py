"""Who the tests' identity provider is, who it knows, and how the test control plane's API server trusts it.

Pure values and one document, no I/O: the control plane writes `authentication_config` before its API server
starts (the provider itself may start later: the API server fetches the issuer's discovery document and keys
when it first needs them, and again until they come).

One issuer URL for everyone: the API server (a process of the machine), the browser of a test and pods on the
node all reach `ISSUER_URL`, a test host address (towline_dev.node.probehosts) the machine routes to the test
hosts' network namespace and the node routes pods to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ISSUER_ADDRESS = "198.51.100.210"
"""A test host address (198.51.100.192/27) of its own: Hydra's public endpoints and the login app listen here."""
ISSUER_PORT = 443
ISSUER_URL = f"https://{ISSUER_ADDRESS}"
"""The `iss` of every token, and where discovery is (`/.well-known/openid-configuration`)."""
LOGIN_APP_PORT = 8443
LOGIN_APP_URL = f"https://{ISSUER_ADDRESS}:{LOGIN_APP_PORT}"
"""The login and consent app Hydra sends the browser to (towline_dev.idp.loginapp)."""
TEST_REDIRECT_URI = f"{LOGIN_APP_URL}/callback"
"""A redirect URI for tests that redeem the code themselves: the login app answers it with a plain page (never
showing the code), so a browser sent there lands somewhere real."""
WEB_VIEW_CLIENT_ID = "towline-web"
"""The web view's OAuth2 client id: the audience the API server accepts, and no other."""
USERNAME_PREFIX = "oidc:"
"""Put before the `sub` claim to make the Kubernetes user name (bob signs in as `oidc:bob`): docs/web-view.md says
why. The certificate and token users (`bob`, `admin`, `system:...`) are out of the provider's reach."""
GROUPS_PREFIX = "oidc:"
"""Put before each entry of the `groups` claim (bob's `approvers` is `oidc:approvers`), for the same reason:
no provider-made group can be `system:masters`."""


@dataclass(frozen=True)
class Person:
    """Someone who signs in at the test provider: the `sub` of their tokens and their `groups` claim."""

    name: str
    groups: tuple[str, ...]

    @property
    def username(self) -> str:
        """The user name the API server gives this person's ID token (what `decidedBy` reads)."""
        return USERNAME_PREFIX + self.name

    @property
    def kubernetes_groups(self) -> tuple[str, ...]:
        """The groups the API server gives this person's ID token (besides `system:authenticated`)."""
        return tuple(GROUPS_PREFIX + group for group in self.groups)


PEOPLE: tuple[Person, ...] = (
    Person("alice", ("team-a",)),
    Person("bob", ("team-b", "approvers")),
    Person("carol", ("team-a",)),
    Person("dave", ("contractors",)),
)
"""The test people, with the groups the static-token people of the same names have (towline_dev.kubeconfig);
dave is the one nobody grants anything."""


def person(name: str) -> Person:
    """The test person called `name`; a clear error naming the ones there are."""
    for candidate in PEOPLE:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no test person {name!r}: the provider knows {', '.join(p.name for p in PEOPLE)}")


def authentication_config(ca_pem: str) -> dict[str, Any]:
    """The API server's `--authentication-config`: trust ID tokens of `ISSUER_URL` whose TLS certificate `ca_pem`
    signed, for the web view's client only, naming the user by `sub` and the groups by `groups`, both prefixed."""
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [{
            "issuer": {
                "url": ISSUER_URL,
                "audiences": [WEB_VIEW_CLIENT_ID],
                "audienceMatchPolicy": "MatchAny",
                "certificateAuthority": ca_pem,
            },
            "claimMappings": {
                "username": {"claim": "sub", "prefix": USERNAME_PREFIX},
                "groups": {"claim": "groups", "prefix": GROUPS_PREFIX},
            },
        }],
    }

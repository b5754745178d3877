"""Pydantic building blocks shared by every action's input and output models.

Inputs are what users write under a step's `with:`, so field names are camelCase
like the rest of a Kubernetes manifest and unknown fields are errors (a typo
must not silently do nothing). A credential appears here only as a reference
(alias + key), never as a value.
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from towline_connectors.wire import is_template


def _check_http_url(value: str) -> str:
    """Catch a malformed literal URL when the workflow is validated, not when it runs."""
    if is_template(value):
        return value  # checked again after the operator resolves the binding
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an absolute http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not contain a user name or password; use `auth` with a credential reference")
    return value


HttpUrlText = Annotated[str, AfterValidator(_check_http_url)]


class InputModel(BaseModel):
    """Base of every action input: camelCase aliases, unknown fields forbidden."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
    )


class OutputModel(BaseModel):
    """Base of every action output; serialised by alias into the result document."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class CredentialRef(InputModel):
    """One key of a mounted credential: `{credential: crm, key: token}`."""

    credential: str = Field(min_length=1, description="Alias of the credential in the step's `credentials` map.")
    key: str = Field(min_length=1, description="Key inside that Secret.")

    def __str__(self) -> str:
        return f"{self.credential}/{self.key}"


USERNAME_KEY, PASSWORD_KEY = "username", "password"
"""The keys a username and password credential is read from unless the step names others."""


class UserPassRef(InputModel):
    """A username and password held in one credential (basic auth, SMTP)."""

    credential: str = Field(min_length=1, description="Alias of the credential in the step's `credentials` map.")
    username_key: str = Field(default=USERNAME_KEY, min_length=1)
    password_key: str = Field(default=PASSWORD_KEY, min_length=1)

    @property
    def username(self) -> CredentialRef:
        return CredentialRef(credential=self.credential, key=self.username_key)

    @property
    def password(self) -> CredentialRef:
        return CredentialRef(credential=self.credential, key=self.password_key)

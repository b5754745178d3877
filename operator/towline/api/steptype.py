"""StepType and ClusterStepType: a user's own container as a step, declared like a built-in action.

A type says which image runs (and optionally its command and args), the JSON
Schemas of its inputs and outputs, the credential slots a workflow step binds
to Secrets, the TCP ports it needs egress on (hosts come from the step's
`allowHosts`, as for `http.request`), default resources, timeout and retry,
and whether it honours the idempotency key. Workflows name one in `action:` as
`steptype/<name>` (same namespace) or `clustersteptype/<name>`: the kind is
explicit, so a namespaced type never shadows a cluster type and no name is
ambiguous.

Pure data: the operator reports `Ready` (the schemas are valid JSON Schema, the
image is allowed) in status; the chart's admission policy enforces who may
register which images.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from towline.api.common import (
    DNS_SUBDOMAIN_PATTERN,
    IDENTIFIER_PATTERN,
    NAMES_A_SECRET,
    SECRET_KEY_PATTERN,
    Conditions,
    FreeObject,
    GenerationStatus,
    TowlineModel,
    TowlineResource,
    cel_rule,
    cel_rules,
    list_map,
)
from towline.api.resources import StepResources
from towline.api.steptypenames import StepTypeKind
from towline.api.workflow import Port, RetryPolicy

IMAGE_PATTERN = (
    r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]{1,5})?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
"""An OCI image reference as the kubelet pulls it: registry/path[:tag][@sha256:digest], lower case path."""
SLOT_PATTERN = IDENTIFIER_PATTERN
"""A credential slot's name: the directory its keys are mounted under, and the key of a step's `credentials`,
so the very pattern of those keys (a slot with a `-` could be declared but never bound)."""

EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}

SLOT_ADVICE = ("a slot's name is the key a step binds it under in credentials: lower-case letters, digits and _, "
               "starting with a letter (no -), e.g. deploy_api")


def _check_slot_name(text: str) -> str:
    if not re.fullmatch(SLOT_PATTERN, text):
        raise ValueError(f"{text!r} is not a slot name; {SLOT_ADVICE}")
    return text


# The pattern for the API server's schema, the check (with the fix in its message) for the operator's.
SlotName = Annotated[str, Field(max_length=63, json_schema_extra={"pattern": SLOT_PATTERN}),
                     AfterValidator(_check_slot_name)]
SecretKey = Annotated[str, Field(pattern=SECRET_KEY_PATTERN, max_length=253, description="A key of a Secret's data.")]
JsonSchema = FreeObject


class CredentialSlot(TowlineModel):
    """A named credential the type reads: a workflow step binds the slot to a Secret holding these keys."""

    model_config = ConfigDict(json_schema_extra=cel_rules(cel_rule(
        f"self.name.matches('{SLOT_PATTERN}')", SLOT_ADVICE, field_path=".name",
    )))

    name: SlotName = Field(description="The slot, e.g. api; mounted at /var/run/towline/credentials/<slot>/<key>.")
    keys: list[SecretKey] = Field(min_length=1, max_length=16, description="The Secret keys read, e.g. [token].")
    description: str = Field(default="", max_length=1024, description="What the credential is for, for people.")
    optional: bool = Field(default=False, description="A step may leave this slot unbound.")


class StepEgress(TowlineModel):
    """Where the type's container may connect: these ports, to the step's `allowHosts` only."""

    ports: list[Port] = Field(default_factory=list, max_length=16, description="TCP ports, e.g. [443].")


class StepTypeSpec(TowlineModel):
    """What runs, what it takes and returns, which credentials and egress it needs, how it is retried."""

    description: str = Field(default="", max_length=4096, description="One paragraph for the catalog.")
    image: str = Field(
        max_length=512, pattern=IMAGE_PATTERN,
        description="The image, e.g. registry.example.com/team/deploy@sha256:...; the chart's image policy "
        "decides which registries are allowed and whether a digest is required.",
    )
    image_pull_secrets: list[Annotated[str, Field(
        pattern=DNS_SUBDOMAIN_PATTERN, max_length=253, description="A Secret's name.",
    ), NAMES_A_SECRET]] = Field(
        default_factory=list, max_length=8,
        description="Names of Secrets of type kubernetes.io/dockerconfigjson the kubelet pulls the image with: "
        "in the step's namespace (for a ClusterStepType, each namespace that uses it needs them).",
    )
    command: list[Annotated[str, Field(max_length=4096, description="One argument.")]] | None = Field(
        default=None, max_length=64, description="Overrides the image's entrypoint."
    )
    args: list[Annotated[str, Field(max_length=4096, description="One argument.")]] | None = Field(
        default=None, max_length=64, description="Overrides the image's default arguments."
    )
    inputs: JsonSchema = Field(
        default_factory=lambda: dict(EMPTY_OBJECT_SCHEMA),
        description="A JSON Schema (draft 2020-12) for the step's `with`; checked before anything runs. "
        "Defaults to {type: object}.",
    )
    outputs: JsonSchema = Field(
        default_factory=lambda: dict(EMPTY_OBJECT_SCHEMA),
        description="A JSON Schema (draft 2020-12) the result's `output` must match. Defaults to {type: object}.",
    )
    credentials: list[CredentialSlot] = Field(
        default_factory=list, max_length=16, json_schema_extra=list_map("name"),
        description="Credential slots a step binds to Secrets in its credentials map; the pod mounts only their "
        "declared keys.",
    )
    egress: StepEgress = Field(
        default_factory=StepEgress, description="TCP ports the container may connect to, to the step's allowHosts.",
    )
    resources: StepResources = Field(
        default_factory=StepResources, description="The container's requests and limits.",
    )
    timeout_seconds: int | None = Field(
        default=None, ge=1, le=86400, description="Per attempt; a step's own timeoutSeconds wins."
    )
    retry: RetryPolicy | None = Field(default=None, description="A step's own retry wins.")
    idempotency_key: bool = Field(
        default=False,
        description="The container honours TOWLINE_IDEMPOTENCY_KEY, so retrying a mutating attempt is safe.",
    )
    mutating: bool = Field(
        default=True, description="Running it changes something outside the pod (retries then need the key)."
    )




class StepTypeStatus(GenerationStatus):
    """Whether the type is usable. Written only by the operator."""

    conditions: Conditions = Field(
        default_factory=list,
        description="Ready: True (reason Usable) when the spec parses, both schemas are valid and the image is "
        "allowed; False (reason Unusable) with every reason otherwise.",
    )


class _StepTypeResource(TowlineResource):
    """What a StepType and a ClusterStepType both are; they differ only in kind and scope (towline.api.crdgen)."""

    spec: StepTypeSpec = Field(description="The image, its inputs and outputs, credentials, egress and retry.")
    status: StepTypeStatus | None = Field(default=None, description="Written by the operator only.")


class StepType(_StepTypeResource):
    """A namespaced step type: usable by workflows in its namespace as `action: steptype/<name>`."""

    kind: Literal["StepType"] = "StepType"


class ClusterStepType(_StepTypeResource):
    """A cluster-wide step type: usable by every namespace as `action: clustersteptype/<name>`."""

    kind: Literal["ClusterStepType"] = "ClusterStepType"


class ResolvedStepType(TowlineModel):
    """A type as a run resolved it when it started: what ran is in the run's history, whatever the type says now."""

    kind: StepTypeKind = Field(description="StepType or ClusterStepType.")
    name: str = Field(max_length=253, description="The type's name.")
    uid: str | None = Field(default=None, max_length=128, description="The type's metadata.uid.")
    generation: int | None = Field(default=None, ge=0, description="The type's metadata.generation.")
    spec: StepTypeSpec = Field(description="The type's spec as it was when the run started.")

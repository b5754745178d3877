"""Shared pieces of the three resources: the model base, conditions, durations, names.

Pure data and parsing: nothing here talks to the API server or reads a clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from towline_step.protocol import CREDENTIAL_KEY_PATTERN

GROUP = "towline.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

IDENTIFIER_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"
"""Step, param and trigger ids, and credential aliases (a step's `credentials` keys, a step type's slot names):
snake_case, so CEL reads `steps.load_accounts.output`."""

DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""What Kubernetes accepts as an object name (Secrets, Workflows)."""

SECRET_KEY_PATTERN = rf"^{CREDENTIAL_KEY_PATTERN}$"
"""A Secret's data key, whole: the step protocol's credential key (a file in its slot's directory)."""

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$"
"""Go-style durations as people write them in YAML: `90s`, `15m`, `24h`, `1h30m`, `7d`."""

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class TowlineModel(BaseModel):
    """Base for every API model: camelCase on the wire, unknown fields rejected.

    Rejecting unknown fields makes a typo (`timeoutSecond`) an error that names
    the field instead of a setting that silently does nothing.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=False,
        validate_assignment=False,
    )

    def to_wire(self) -> dict[str, object]:
        """The JSON form written to the API server: aliases, no unset optionals."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def parse_duration(text: str) -> timedelta:
    """Parse `1h30m`-style durations; raises ValueError naming the accepted form."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(
            f"{text!r} is not a duration; write a number and a unit (ms, s, m, h, d), e.g. 90s, 15m, 24h, 1h30m"
        )
    seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))
    return timedelta(seconds=seconds)


def _check_duration(text: str) -> str:
    parse_duration(text)
    return text


# Field before AfterValidator: the other order drops `pattern` from the JSON schema (and so the CRD).
Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=32), AfterValidator(_check_duration)]
Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN, max_length=63)]
StepId = Annotated[Identifier, Field(description="The id of a step (snake_case).")]
ObjectName = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]
FreeObject = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
"""A JSON object the API server keeps whole (its values are free-form: params, inputs, payloads, schemas)."""

REFERENCE_ADVICE = (
    "put the value in a Secret and reference it by name: "
    "kubectl create secret generic crm-api --from-literal=token=..."
)


REFERENCE_NAME_CHARACTERS = "^[a-z0-9.-]+$"
"""What the API server checks of a Secret reference: a full DNS regex over every credential of
1000 steps exceeds the CEL cost budget, and the character set alone catches pasted tokens.
The operator checks the complete form."""


def secret_reference_rules() -> JsonDict:
    """CEL rules for a map of alias -> Secret name, reported at the map so no value is echoed.

    The API server quotes a string in errors about that string; a rule on the
    enclosing object quotes nothing, and its messageExpression names the alias.
    """
    bad = f"self.filter(k, !self[k].matches('{REFERENCE_NAME_CHARACTERS}'))"
    return cel_rules({
        "rule": f"self.all(k, self[k].matches('{REFERENCE_NAME_CHARACTERS}'))",
        "messageExpression": f"'credentials.' + {bad}[0] + ' must name a Secret in this namespace, never hold "
        f"the credential itself; {REFERENCE_ADVICE}'",
    })


def _check_secret_name(text: str) -> str:
    # Never echo the value: a pasted token must not reach an error, a status or a log line.
    if not re.fullmatch(DNS_SUBDOMAIN_PATTERN, text):
        raise ValueError(f"must name a Secret in this namespace, not hold a credential; {REFERENCE_ADVICE}")
    return text


def cel_rule(rule: str, message: str, *, field_path: str | None = None, reason: str | None = None) -> JsonDict:
    """One `x-kubernetes-validations` entry: a CEL rule the API server checks, and what to tell the user."""
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


def cel_rules(*rules: JsonDict) -> JsonDict:
    """`json_schema_extra` attaching CEL rules to a field or (via `model_config`) to a model."""
    return {"x-kubernetes-validations": list(rules)}


def list_map(*keys: str) -> JsonDict:
    """`json_schema_extra` making a list a map keyed by `keys`: the API server rejects duplicates."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def unchanged(field: str) -> str:
    """CEL for an update rule: `field` is as it was, including being absent."""
    return (
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    )


def immutable(field: str, hint: str) -> JsonDict:
    """A transition rule on a spec: `spec.<field>` may not change after creation."""
    return cel_rule(unchanged(field), f"spec.{field} is immutable; {hint}", field_path=f".{field}")


def final_once_set(field: str, message: str) -> JsonDict:
    """A transition rule: once `field` is set it keeps its value (an Approval's decision and decider)."""
    return cel_rule(f"!has(oldSelf.{field}) || (has(self.{field}) && self.{field} == oldSelf.{field})", message,
                    field_path=f".{field}")


def stays_on(switch: str, message: str) -> JsonDict:
    """A transition rule: a boolean switch once true stays true (a run's cancel and stop)."""
    return cel_rule(f"!has(oldSelf.{switch}) || !oldSelf.{switch} || (has(self.{switch}) && self.{switch})", message,
                    field_path=f".{switch}")


def only_beside(field: str, other: str, message: str) -> JsonDict:
    """`field` may be set only where `other` is (e.g. a step's `with` only on an action step)."""
    return cel_rule(f"!has(self.{field}) || has(self.{other})", message, field_path=f".{field}")


def exactly_one(fields: tuple[str, ...], message: str) -> JsonDict:
    """Exactly one of `fields` is set (what kind of step or trigger an object is)."""
    return cel_rule(" + ".join(f"(has(self.{field}) ? 1 : 0)" for field in fields) + " == 1", message)


UserName = Annotated[
    str, Field(min_length=1, max_length=253, description="A Kubernetes user name, as admission sees it."),
]
"""A Kubernetes user name, as admission sees it (request.userInfo.username)."""
MAX_EARLIER_REQUESTERS = 16
"""A retry of a retry of ... names its first requester and the latest ones, up to this many."""

@dataclass(frozen=True)
class NamesASecret:
    """Marks a field as naming a Secret: `towline.api.secretrefs` finds every such field of a resource's spec,
    and the chart's credentials policies must check each one (test_attack_secret_references.py tries them)."""


NAMES_A_SECRET = NamesASecret()

SecretName = Annotated[
    str,
    Field(min_length=1, max_length=253, description="The name of a Secret in this namespace; never its value."),
    AfterValidator(_check_secret_name),
    NAMES_A_SECRET,
]
"""The name of a Secret in the workflow's namespace: a reference, never a value."""


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(TowlineModel):
    """A Kubernetes API convention condition, as kstatus, Flux and Argo CD read it."""

    type: str = Field(max_length=316, description="The condition's type, e.g. Ready.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Why, as one CamelCase word a program can match, e.g. Valid or InvalidSpec.",
    )
    message: str = Field(default="", max_length=32768, description="Why, for a person.")
    last_transition_time: datetime = Field(description="When the status last changed.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation the condition was computed from.",
    )


Conditions = Annotated[list[Condition], Field(json_schema_extra=list_map("type"))]
"""A status's conditions, a list the API server keys by type: at most one condition of each type."""


class GenerationStatus(TowlineModel):
    """Base of a status that says which spec it describes (kstatus compares it with metadata.generation)."""

    observed_generation: int | None = Field(
        default=None, description="The metadata.generation this status describes.",
    )


class TowlineResource(TowlineModel):
    """Base of the group's resources: the envelope every object has besides its spec and status.

    Each resource names its kind, e.g. `kind: Literal["Workflow"] = "Workflow"`; the CRDs take
    apiVersion, kind and metadata from Kubernetes' envelope, not from these fields (towline.api.structural).
    """

    api_version: Literal["towline.dev/v1alpha1"] = "towline.dev/v1alpha1"
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class SecretKeyRef(TowlineModel):
    """A reference to one key of a Secret in the same namespace; never the value."""

    # On the object, not on `name`: a rule on a string quotes the string in its error.
    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel_rule(
                f"self.name.matches('{REFERENCE_NAME_CHARACTERS}')",
                f"name must be the name of a Secret in this namespace, never the secret itself; {REFERENCE_ADVICE}",
                field_path=".name",
            ),
        )
    )

    name: SecretName = Field(description="The name of a Secret in this namespace; never the secret itself.")
    key: Annotated[str, Field(pattern=SECRET_KEY_PATTERN, max_length=253)] = Field(
        description="The key of that Secret's data holding the value.",
    )


class Approvers(TowlineModel):
    """Who may decide an approval: any listed user, or any member of a listed group."""

    users: list[Annotated[str, Field(min_length=1, max_length=253, description="A Kubernetes user name.")]] = Field(
        default_factory=list, max_length=50,
        description="Kubernetes user names that may decide, e.g. alice or system:serviceaccount:ns:deployer.",
    )
    groups: list[Annotated[str, Field(min_length=1, max_length=253, description="A Kubernetes group name.")]] = (
        Field(
            default_factory=list, max_length=50,
            description="Kubernetes groups whose members may decide, e.g. account-managers. With neither users "
            "nor groups, the chart's admission policy lets nobody decide.",
        )
    )

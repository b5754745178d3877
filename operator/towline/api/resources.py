"""CPU and memory of a step's container: a step's own `resources`, a step type's, the chart's defaults.

Quantities are the subset of Kubernetes quantities people write for CPU and memory (`100m`, `0.5`,
`128Mi`, `1Gi`); `quantity_value` reads one as a number, so a limit below its request is refused
here, naming the field, as the API server would refuse the pod built from it.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from towline.api.common import TowlineModel, cel_rule, cel_rules

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"
"""A resource quantity as people write them for CPU and memory: `100m`, `0.5`, `128Mi`, `1Gi`."""
RESOURCE_NAMES = ("cpu", "memory")

_SUFFIXES = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
}

Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=32)]


def quantity_value(text: str) -> Decimal:
    """The amount a quantity names (cores or bytes); ValueError for anything QUANTITY_PATTERN does not match."""
    match = re.fullmatch(QUANTITY_PATTERN, text)
    if match is None:
        raise ValueError(f"{text!r} is not a quantity; write it like 100m, 0.5, 128Mi or 1Gi")
    number = text[: len(text) - len(match.group(2) or "")]
    return Decimal(number) * _SUFFIXES[match.group(2) or ""]


def _limit_not_below_request(name: str) -> str:
    # The API server checks the Workflow as it stores it: a pattern failure is reported on its own field.
    request, limit = f"self.requests.{name}", f"self.limits.{name}"
    return (f"!has(self.requests) || !has({request}) || !has(self.limits) || !has({limit}) || "
            f"!isQuantity({request}) || !isQuantity({limit}) || "
            f"quantity({limit}).compareTo(quantity({request})) >= 0")


class ResourceAmounts(TowlineModel):
    """CPU and memory, as Kubernetes quantities."""

    cpu: Quantity | None = Field(default=None, description="CPU, e.g. 100m or 0.5.")
    memory: Quantity | None = Field(default=None, description="Memory, e.g. 128Mi or 1Gi.")


class StepResources(TowlineModel):
    """The container's requests and limits; unset ones take the chart's step pod defaults (stepPods.resources)."""

    model_config = ConfigDict(json_schema_extra=cel_rules(*(
        cel_rule(_limit_not_below_request(name),
                 f"limits.{name} must be at least requests.{name}: raise the limit or lower the request",
                 field_path=f".limits.{name}")
        for name in RESOURCE_NAMES
    )))

    requests: ResourceAmounts = Field(default_factory=ResourceAmounts, description="What the container is given.")
    limits: ResourceAmounts = Field(default_factory=ResourceAmounts, description="The most the container may use.")

    @model_validator(mode="after")
    def _limits_not_below_requests(self) -> StepResources:
        for name in RESOURCE_NAMES:
            request, limit = getattr(self.requests, name), getattr(self.limits, name)
            if request is not None and limit is not None and quantity_value(limit) < quantity_value(request):
                raise ValueError(f"limits.{name} ({limit}) is below requests.{name} ({request}): raise the limit "
                                 "or lower the request")
        return self

    def is_empty(self) -> bool:
        return self.requests == ResourceAmounts() and self.limits == ResourceAmounts()


LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A Kubernetes label or annotation key: an optional DNS subdomain prefix and `/`, then a name of at most 63."""
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
TOWLINE_KEY_ADVICE = ("towline.dev/ keys are Towline's own (its NetworkPolicies and admission policies select "
                      "step pods by them); choose a key of your own, e.g. example.com/cost-center")


# The API server checks the prefix itself (a subdomain of it, `x.towline.dev/`, the operator): a key's length is
# unbounded in a structural schema, and CEL's cost of a search through it would be too.
OWN_KEYS_RULE = "self.all(k, !k.startsWith('towline.dev/'))"


def _key_problem(key: str, kind: str) -> str | None:
    prefix = key.rpartition("/")[0]
    if prefix == "towline.dev" or prefix.endswith(".towline.dev"):
        return f"{kind} {key!r}: {TOWLINE_KEY_ADVICE}"
    if len(key) > 317 or not re.fullmatch(LABEL_KEY_PATTERN, key) or len(prefix) > 253:
        return f"{kind} {key!r} is not a Kubernetes key: [prefix/]name, the name at most 63 letters, digits, -, _ or ."
    return None


class PodMetadata(TowlineModel):
    """More labels and annotations for a step's pod, beside the chart's (stepPods.labels, .annotations)."""

    labels: dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN,
                                           description="A label's value, at most 63 characters.")]] = Field(
        default_factory=dict, max_length=16, json_schema_extra=cel_rules(cel_rule(
            OWN_KEYS_RULE, f"a step pod's labels: {TOWLINE_KEY_ADVICE}")),
        description="Labels of the step's pod, e.g. {cost-center: payments}; never a towline.dev/ key.",
    )
    annotations: dict[str, Annotated[str, Field(max_length=4096, description="An annotation's value.")]] = Field(
        default_factory=dict, max_length=16, json_schema_extra=cel_rules(cel_rule(
            OWN_KEYS_RULE, f"a step pod's annotations: {TOWLINE_KEY_ADVICE}")),
        description="Annotations of the step's pod; never a towline.dev/ key.",
    )

    @model_validator(mode="after")
    def _keys_of_their_own(self) -> PodMetadata:
        for kind, keys in (("labels", self.labels), ("annotations", self.annotations)):
            for key in keys:
                if (problem := _key_problem(key, kind)) is not None:
                    raise ValueError(problem)
        return self

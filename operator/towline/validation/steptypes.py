"""User step types as validation and the engine see them: JSON Schema checks and a catalog over built-ins + types.

A StepType declares its inputs and outputs as JSON Schema (draft 2020-12). The
schemas are checked with `jsonschema`, never by hand, and only through
towline.validation.schemaguard (no reference leaves the schema, patterns run on
RE2, size and work are bounded): a type whose schema is
not valid JSON Schema is not Ready, a step whose literal `with` breaks its
type's input schema keeps its Workflow not Ready with the field path, and an
output that breaks the output schema fails the attempt. A `${{ }}` binding
counts as valid for any field, as it does for built-in actions: it resolves
at run time, and the resolved value is checked again before the Job is made.

`StepTypeCatalog` answers the catalog questions (validation's and the
engine's) for built-ins and for the types a namespace may use, so every
caller asks one object and a type behaves like a built-in everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from jsonschema.exceptions import ValidationError as SchemaViolation
from pydantic import ValidationError

from towline.api.steptype import ResolvedStepType, StepTypeSpec
from towline.api.steptypenames import CLUSTER_STEP_TYPE_PREFIX, STEP_TYPE_PREFIX, StepTypeKind, step_type_reference
from towline.api.workflow import RetryPolicy
from towline.validation.actions import ActionCatalog
from towline.validation.schemaguard import schema_errors, violations
from towline_connectors.wire import is_template

MAX_SCHEMA_ERRORS = 5
"""Messages reported per schema check: enough to fix several fields at once, never a wall of text."""


class BuiltinCatalog(ActionCatalog, Protocol):
    """The catalog's questions asked of the built-in actions, and their ports
    (towline.validation.catalog.ConnectorCatalog answers them)."""

    def connector_ports(self, action: str, inputs: Mapping[str, Any]) -> list[int]: ...


def type_schema_errors(spec: StepTypeSpec) -> list[str]:
    """Why a type cannot be used: a schema that is not JSON Schema, or inputs that are not an object."""
    errors = []
    for field, schema in (("spec.inputs", spec.inputs), ("spec.outputs", spec.outputs)):
        errors.extend(schema_errors(field, schema))
    if spec.inputs.get("type", "object") != "object":
        errors.append("spec.inputs: must describe an object (type: object): a step's `with` is a mapping")
    return errors


def input_errors(schema: Mapping[str, Any], inputs: Mapping[str, Any], *, allow_templates: bool = True) -> list[str]:
    """Messages naming each `with` field that breaks the type's input schema, and how.

    With `allow_templates`, an error about a value that is (or sits under) a `${{ }}` binding is dropped:
    the operator checks again with the resolved values before the step runs.
    """
    messages = []
    for error in violations(schema, dict(inputs)):
        if allow_templates and _about_a_template(error, inputs):
            continue
        messages.append(f"{_path('with', error.absolute_path)}: {_describe(error)}")
    return messages[:MAX_SCHEMA_ERRORS]


def output_errors(schema: Mapping[str, Any], output: Any) -> list[str]:
    """Messages naming each output field that breaks the type's output schema."""
    return [f"{_path('output', error.absolute_path)}: {_describe(error)}"
            for error in violations(schema, output)][:MAX_SCHEMA_ERRORS]


def _describe(error: SchemaViolation) -> str:
    """jsonschema's message, without echoing a long value back (a pasted secret must not reach a status)."""
    message = error.message
    instance = error.instance
    if isinstance(instance, str) and len(instance) > 32 and instance in message:
        message = message.replace(repr(instance), "the given string").replace(instance, "the given string")
    return message[:300]


def _about_a_template(error: SchemaViolation, inputs: Mapping[str, Any]) -> bool:
    if is_template(error.instance):
        return True
    value: Any = inputs
    for part in error.absolute_path:
        if is_template(value):
            return True
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return False
    return is_template(value)


def _path(root: str, parts: Iterable[Any]) -> str:
    path = root
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


class StepTypeCatalog:
    """Built-in actions plus the user types one namespace may use, keyed by `steptype/<n>` / `clustersteptype/<n>`.

    The operator builds one per namespace from its StepType cache (validation) or per run from the run's
    snapshot (the engine and the Job builder), so a type changed mid-run does not change a running run.
    """

    def __init__(
        self, builtins: BuiltinCatalog, types: Mapping[str, StepTypeSpec], unusable: Mapping[str, str] | None = None,
        code_steps_off: str | None = None,
    ) -> None:
        self.builtins = builtins
        self.types = types
        self.unusable = unusable or {}
        """Types that exist but cannot run, with why (not Ready): a step naming one is told the reason."""
        self.code_steps_off = code_steps_off
        """Why code steps (code.python, code.wasm) may not run here (CodeStepPolicy); None when they may."""

    def step_type(self, action: str) -> StepTypeSpec | None:
        return self.types.get(action)

    def known_actions(self) -> list[str]:
        return sorted([*self.builtins.known_actions(), *self.types])

    def why_unavailable(self, action: str) -> str | None:
        if self.code_steps_off is not None and self.builtins.is_code(action):
            return self.code_steps_off
        if step_type_reference(action) is None or action in self.types:
            return self.builtins.why_unavailable(action)
        if action in self.unusable:
            return f"cannot be used: {self.unusable[action]}"
        return "is not registered; register it (kubectl apply -f its manifest) or fix the name"

    def validate_inputs(self, action: str, inputs: Mapping[str, Any]) -> list[str]:
        spec = self.types.get(action)
        if spec is None:
            reason = self.why_unavailable(action)
            return [f"{action} {reason}"] if reason else self.builtins.validate_inputs(action, inputs)
        if not isinstance(inputs, Mapping):
            return ["with: must be a mapping of input names to values"]
        return input_errors(spec.inputs, inputs)

    def is_mutating(self, action: str, inputs: Mapping[str, Any]) -> bool:
        spec = self.types.get(action)
        return self.builtins.is_mutating(action, inputs) if spec is None else spec.mutating

    def credential_refs(self, action: str, inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
        """For a type, every required slot and its first key: a step must bind each to a Secret."""
        spec = self.types.get(action)
        if spec is None:
            return self.builtins.credential_refs(action, inputs)
        return [(slot.name, slot.keys[0]) for slot in spec.credentials if not slot.optional]

    def credential_slots(self, action: str) -> list[str] | None:
        spec = self.types.get(action)
        return self.builtins.credential_slots(action) if spec is None else [slot.name for slot in spec.credentials]

    def is_code(self, action: str) -> bool:
        """Whether `action` runs the author's own code (a built-in code step; user types never are)."""
        return action not in self.types and self.builtins.is_code(action)

    def destination_hosts(self, action: str, inputs: Mapping[str, Any]) -> list[str | None]:
        """For a type, one unknown host per port: where it connects is the step's allowHosts."""
        spec = self.types.get(action)
        if spec is None:
            return self.builtins.destination_hosts(action, inputs)
        return [None for _ in spec.egress.ports]

    def default_retry(self, action: str) -> RetryPolicy | None:
        spec = self.types.get(action)
        if spec is None:
            return self.builtins.default_retry(action)
        return spec.retry

    def connector_ports(self, action: str, inputs: Mapping[str, Any]) -> list[int]:
        spec = self.types.get(action)
        if spec is None:
            return self.builtins.connector_ports(action, inputs)
        return sorted(set(spec.egress.ports))


@dataclass(frozen=True)
class StepImagePolicy:
    """Which images user step types may run: the chart's `stepTypes.allowedImagePrefixes` and `requireDigest`.

    The same values feed the admission policy that refuses such a type at creation; the operator checks
    again (a type created before the policy changed, or while admission was off, is not Ready).
    """

    allowed_prefixes: tuple[str, ...] = ()
    require_digest: bool = False

    def problem(self, image: str) -> str | None:
        """Why `image` may not run as a step type, naming the chart value to change; None when allowed."""
        if not any(image.startswith(prefix) for prefix in self.allowed_prefixes):
            allowed = ", ".join(self.allowed_prefixes) or "none are configured"
            return (f"image {image} is not allowed for step types (allowed prefixes: {allowed}); use an image "
                    "from an allowed registry, or ask the cluster admin to add its prefix to the chart value "
                    "stepTypes.allowedImagePrefixes")
        if self.require_digest and "@sha256:" not in image:
            return (f"image {image} has no digest and the chart requires one (stepTypes.requireDigest); "
                    "pin it as registry/name@sha256:<digest>")
        return None


def action_of(kind: StepTypeKind, name: str) -> str:
    """How a workflow step names the type: `steptype/<name>` or `clustersteptype/<name>`."""
    return f"{STEP_TYPE_PREFIX if kind == 'StepType' else CLUSTER_STEP_TYPE_PREFIX}{name}"


def check_step_type(body: Mapping[str, Any], policy: StepImagePolicy) -> ResolvedStepType | list[str]:
    """The type as a run would snapshot it, or every reason it cannot be used (each names the field)."""
    kind: StepTypeKind = "ClusterStepType" if body.get("kind") == "ClusterStepType" else "StepType"
    metadata = body.get("metadata") or {}
    try:
        spec = StepTypeSpec.model_validate(body.get("spec") or {})
    except ValidationError as error:
        return [f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]]
    problems = type_schema_errors(spec)
    image_problem = policy.problem(spec.image)
    if image_problem:
        problems.append(f"spec.image: {image_problem}")
    if problems:
        return problems
    return ResolvedStepType(kind=kind, name=str(metadata.get("name", "")), uid=metadata.get("uid"),
                            generation=metadata.get("generation"), spec=spec)


def availability(checked: ResolvedStepType | list[str]) -> ResolvedStepType | str:
    """What `check_step_type` found, as a run or a catalog takes it: the type, or why it is not Ready."""
    return checked if isinstance(checked, ResolvedStepType) else "is not Ready: " + "; ".join(checked)


def catalog_from(
    builtins: BuiltinCatalog, available: Mapping[str, ResolvedStepType | str], code_steps_off: str | None = None
) -> StepTypeCatalog:
    """The built-ins and these types (usable or not, with why) as one catalog for validation."""
    usable = {action: found.spec for action, found in available.items() if isinstance(found, ResolvedStepType)}
    unusable = {action: found for action, found in available.items() if isinstance(found, str)}
    return StepTypeCatalog(builtins, usable, unusable, code_steps_off)

"""The operator's settings for step pods, from its environment (the chart's stepPods values).

Each is checked here as the API server would check it, so a bad value stops the operator at start, naming the
chart value, rather than failing every step Job; and the labels and annotations may not name a towline.dev/ key,
which only Towline sets (its NetworkPolicies and admission policies select on them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from towline.api.common import DNS_SUBDOMAIN_PATTERN
from towline.api.resources import RESOURCE_NAMES, quantity_value
from towline.k8s.labels import is_towline_key
from towline.k8s.objects import DEFAULT_STEP_RESOURCES, MESH_OPT_OUT_ANNOTATIONS

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_TOLERATION_FIELDS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


def step_image_pull_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """TOWLINE_STEP_IMAGE_PULL_SECRETS (comma separated names, from the chart's stepPods.imagePullSecrets or the
    top-level imagePullSecrets)."""
    text = env.get("TOWLINE_STEP_IMAGE_PULL_SECRETS", "")
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for name in names:
        if len(name) > 253 or not re.match(DNS_SUBDOMAIN_PATTERN, name):
            raise ValueError(f"TOWLINE_STEP_IMAGE_PULL_SECRETS: {name!r} is not a Secret name; set "
                             "stepPods.imagePullSecrets (or imagePullSecrets) in the chart values to "
                             "[{name: regcred}] with the names of kubernetes.io/dockerconfigjson Secrets")
    return names


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not re.match(DNS_SUBDOMAIN_PATTERN, prefix)):
        return f"the prefix of label key {key!r} is not a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME.match(name):
        return (f"label key {key!r} must end in a name of at most 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    return None


def _is_label_value(value: str) -> bool:
    return not value or (len(value) <= 63 and _LABEL_NAME.match(value) is not None)


def _json_setting(env: Mapping[str, str], name: str, empty: Any, fix: str) -> Any:
    text = env.get(name, "").strip()
    if not text:
        return empty
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON ({exc.msg}){fix}") from None


def step_node_selector(env: Mapping[str, str]) -> dict[str, str]:
    """TOWLINE_STEP_NODE_SELECTOR (a JSON object of labels, from the chart's stepPods.nodeSelector)."""
    fix = "; set stepPods.nodeSelector in the chart values to a map of node labels, e.g. {pool: steps}"
    return _label_map(env, "TOWLINE_STEP_NODE_SELECTOR", fix, towline_keys_refused=False)


def _label_map(env: Mapping[str, str], name: str, fix: str, *, towline_keys_refused: bool) -> dict[str, str]:
    """A JSON object of Kubernetes labels from `name` (unset: none), each key and value as the API server takes
    them; with `towline_keys_refused`, no key under towline.dev/ (Towline's own labels select step pods)."""
    labels = _json_setting(env, name, {}, fix)
    if not isinstance(labels, dict):
        raise ValueError(f"{name} must be a JSON object{fix}")
    for key, value in labels.items():
        problem = (_towline_key_problem(key, "label") if towline_keys_refused else None) or _label_key_problem(key)
        if problem is None and not isinstance(value, str):
            problem = f"the value of {key!r} must be a string, not {json.dumps(value)}"
        elif problem is None and not _is_label_value(value):
            problem = f"the value of {key!r}, {value!r}, is not a label value"
        if problem:
            raise ValueError(f"{name}: {problem}{fix}")
    return labels


def _toleration_problems(toleration: Any) -> Iterator[str]:
    """What the API server would refuse in one toleration (core/v1 validation)."""
    if not isinstance(toleration, dict):
        yield f"{json.dumps(toleration)} is not an object"
        return
    unknown = sorted(set(toleration) - _TOLERATION_FIELDS)
    if unknown:
        yield f"unknown field {unknown[0]!r} (a toleration has {', '.join(sorted(_TOLERATION_FIELDS))})"
    if not all(isinstance(toleration.get(name, ""), str) for name in ("key", "operator", "value", "effect")):
        yield "key, operator, value and effect must be strings"
        return
    key, operator = toleration.get("key", ""), toleration.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        yield f"operator must be Equal or Exists, not {operator!r}"
    if operator == "Exists" and toleration.get("value"):
        yield "a toleration with operator Exists has no value"
    if operator == "Equal" and not _is_label_value(toleration.get("value", "")):
        yield f"value {toleration['value']!r} is not a label value"
    if not key and operator != "Exists":
        yield "a toleration without a key must have operator Exists"
    if key and (problem := _label_key_problem(key)):
        yield problem
    if toleration.get("effect", "") not in _TOLERATION_EFFECTS:
        yield f"effect must be one of NoSchedule, PreferNoSchedule, NoExecute, not {toleration['effect']!r}"
    if "tolerationSeconds" in toleration:
        seconds = toleration["tolerationSeconds"]
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            yield "tolerationSeconds must be a whole number"
        if toleration.get("effect") != "NoExecute":
            yield "tolerationSeconds applies only to effect NoExecute"


def step_tolerations(env: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """TOWLINE_STEP_TOLERATIONS (a JSON list of tolerations, from the chart's stepPods.tolerations)."""
    fix = ("; set stepPods.tolerations in the chart values to a list of tolerations, e.g. "
           "[{key: dedicated, operator: Equal, value: steps, effect: NoSchedule}]")
    tolerations = _json_setting(env, "TOWLINE_STEP_TOLERATIONS", [], fix)
    if not isinstance(tolerations, list):
        raise ValueError(f"TOWLINE_STEP_TOLERATIONS must be a JSON list{fix}")
    for index, toleration in enumerate(tolerations):
        problem = next(_toleration_problems(toleration), None)
        if problem:
            raise ValueError(f"TOWLINE_STEP_TOLERATIONS[{index}]: {problem}{fix}")
    return tuple(tolerations)




def step_labels_setting(env: Mapping[str, str]) -> dict[str, str]:
    """TOWLINE_STEP_LABELS (a JSON object, from the chart's stepPods.labels): more labels for every step pod."""
    fix = "; set stepPods.labels in the chart values to a map of labels, e.g. {cost-center: platform}"
    return _label_map(env, "TOWLINE_STEP_LABELS", fix, towline_keys_refused=True)


def step_annotations_setting(env: Mapping[str, str]) -> dict[str, str]:
    """TOWLINE_STEP_ANNOTATIONS (a JSON object, from the chart's stepPods.annotations); unset: the service mesh
    opt-out the chart sets by default."""
    fix = ('; set stepPods.annotations in the chart values to a map of strings, e.g. '
           '{sidecar.istio.io/inject: "false"}')
    annotations = _json_setting(env, "TOWLINE_STEP_ANNOTATIONS", dict(MESH_OPT_OUT_ANNOTATIONS), fix)
    if not isinstance(annotations, dict):
        raise ValueError(f"TOWLINE_STEP_ANNOTATIONS must be a JSON object{fix}")
    for key, value in annotations.items():
        problem = _towline_key_problem(key, "annotation") or _label_key_problem(key)
        if problem is None and not isinstance(value, str):
            problem = f"the value of {key!r} must be a string, not {json.dumps(value)} (quote it)"
        if problem:
            raise ValueError(f"TOWLINE_STEP_ANNOTATIONS: {problem.replace('label key', 'annotation key')}{fix}")
    return annotations


def _towline_key_problem(key: str, what: str) -> str | None:
    if is_towline_key(key):
        return (f"{what} {key!r} is Towline's own (towline.dev/): the NetworkPolicies and admission policies select "
                f"step pods by those, so only Towline sets them; choose a key of your own")
    return None


def step_affinity(env: Mapping[str, str]) -> dict[str, Any]:
    """TOWLINE_STEP_AFFINITY (a JSON object, from the chart's stepPods.affinity): the pods' affinity as written."""
    fix = "; set stepPods.affinity in the chart values to a Kubernetes affinity, e.g. {nodeAffinity: {...}}"
    affinity = _json_setting(env, "TOWLINE_STEP_AFFINITY", {}, fix)
    if not isinstance(affinity, dict):
        raise ValueError(f"TOWLINE_STEP_AFFINITY must be a JSON object{fix}")
    unknown = sorted(set(affinity) - {"nodeAffinity", "podAffinity", "podAntiAffinity"})
    if unknown:
        raise ValueError(f"TOWLINE_STEP_AFFINITY: unknown field {unknown[0]!r} (an affinity has nodeAffinity, "
                         f"podAffinity and podAntiAffinity){fix}")
    return affinity


def step_priority_class_name(env: Mapping[str, str]) -> str:
    """TOWLINE_STEP_PRIORITY_CLASS_NAME (from the chart's stepPods.priorityClassName); empty: the cluster's default."""
    name = env.get("TOWLINE_STEP_PRIORITY_CLASS_NAME", "").strip()
    if name and (len(name) > 253 or not re.match(DNS_SUBDOMAIN_PATTERN, name)):
        raise ValueError(f"TOWLINE_STEP_PRIORITY_CLASS_NAME: {name!r} is not a PriorityClass name; set "
                         "stepPods.priorityClassName in the chart values to the name of a PriorityClass, e.g. "
                         "towline-steps")
    return name


def step_resources(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """TOWLINE_STEP_RESOURCES (a JSON ResourceRequirements of cpu and memory, from the chart's stepPods.resources):
    every step container's requests and limits unless its step or step type sets its own."""
    fix = ('; set stepPods.resources in the chart values, e.g. '
           '{requests: {cpu: 50m, memory: 64Mi}, limits: {cpu: "1", memory: 256Mi}}')
    default = {kind: dict(amounts) for kind, amounts in DEFAULT_STEP_RESOURCES.items()}
    resources = _json_setting(env, "TOWLINE_STEP_RESOURCES", default, fix)
    if not isinstance(resources, dict) or not set(resources) <= {"requests", "limits"}:
        raise ValueError(f"TOWLINE_STEP_RESOURCES must be a JSON object of requests and limits{fix}")
    for kind, amounts in resources.items():
        if not isinstance(amounts, dict) or not set(amounts) <= set(RESOURCE_NAMES):
            raise ValueError(f"TOWLINE_STEP_RESOURCES: {kind} must be an object of cpu and memory{fix}")
        for name, written in amounts.items():
            value = f"{written:g}" if isinstance(written, int | float) and not isinstance(written, bool) else written
            amounts[name] = value  # YAML's `cpu: 1` as Kubernetes reads it: a string
            try:
                quantity_value(value if isinstance(value, str) else json.dumps(value))
            except ValueError:
                raise ValueError(f"TOWLINE_STEP_RESOURCES: {kind}.{name} {value!r} is not a quantity such as 100m, "
                                 f"0.5, 128Mi or 1Gi (write it as a string){fix}") from None
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for name in set(requests) & set(limits):
        if quantity_value(limits[name]) < quantity_value(requests[name]):
            raise ValueError(f"TOWLINE_STEP_RESOURCES: limits.{name} ({limits[name]}) is below requests.{name} "
                             f"({requests[name]}): raise stepPods.resources.limits.{name} or lower the request")
    return resources

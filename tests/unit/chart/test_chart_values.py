"""The chart's values.schema.json describes every value of values.yaml and refuses any other key.

Helm checks values against the schema before it renders anything, so a misspelt key fails
`helm install` naming it, but only where the schema says `additionalProperties: false`. These tests
keep it so as values are added: every key of values.yaml has a schema, and every object in the
schema is closed, except the free-form maps below (labels, annotations, selectors, resource
quantities, Kubernetes affinity, volumes, relabelings and NetworkPolicy peers, whose keys are the user's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import jsonschema
import yaml

from towline_dev.chartvalues import CHART, resolve, schema, schema_at, value_paths, values

FREE_FORM = {
    "operator.podAnnotations", "operator.nodeSelector", "operator.affinity",
    "operator.resources.requests", "operator.resources.limits",
    "operator.topologySpreadConstraints[].labelSelector",
    "ingress.podAnnotations", "ingress.nodeSelector", "ingress.affinity",
    "ingress.resources.requests", "ingress.resources.limits",
    "ingress.topologySpreadConstraints[].labelSelector", "ingress.expose.ingress.annotations",
    "archive.podAnnotations", "archive.nodeSelector", "archive.affinity",
    "archive.resources.requests", "archive.resources.limits",
    "archive.topologySpreadConstraints[].labelSelector",
    "ui.podAnnotations", "ui.nodeSelector", "ui.affinity", "ui.resources.requests", "ui.resources.limits",
    "ui.topologySpreadConstraints[].labelSelector", "ui.expose.ingress.annotations",
    "tests.podAnnotations", "tests.nodeSelector", "tests.affinity",
    "tests.resources.requests", "tests.resources.limits",
    "tests.topologySpreadConstraints[].labelSelector",
    "stepPods.nodeSelector", "stepPods.affinity", "stepPods.labels", "stepPods.annotations",
    "commonLabels", "podLabels", "serviceAccount.annotations", "ingress.service.annotations",
    "operator.extraVolumes[]", "ingress.extraVolumes[]", "archive.extraVolumes[]", "ui.extraVolumes[]",
    "tests.extraVolumes[]",
    # Each component's ServiceAccount and every Service the chart makes take annotations.
    "ingress.serviceAccount.annotations", "archive.serviceAccount.annotations", "ui.serviceAccount.annotations",
    "operator.service.annotations", "ingress.metricsService.annotations", "archive.metricsService.annotations",
    "archive.api.service.annotations", "ui.service.annotations",
    "serviceMonitor.relabelings[]", "serviceMonitor.metricRelabelings[]",
    "networkPolicy.dns.podLabels", "networkPolicy.metricsFrom[]",
    "tracing.egress[].to[]", "tracing.egress[].ports[]",  # NetworkPolicy peers and ports, passed through
    "events.sink.egressTo[]",  # NetworkPolicy peers, passed through
    "serviceMonitor.labels", "prometheusRule.labels", "grafanaDashboard.labels", "grafanaDashboard.annotations",
}
"""Maps whose keys the user chooses: the schema may constrain their values, not their keys."""


def object_schemas(node: dict[str, Any], root: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (dotted path, schema) under `node` that describes an object; `[]` marks a list's items."""
    node = resolve(node, root)
    for branch in node.get("oneOf", []) + node.get("anyOf", []):
        yield from object_schemas(branch, root, path)
    if node.get("type") == "object" or "properties" in node:
        yield path, node
    for key, child in node.get("properties", {}).items():
        yield from object_schemas(child, root, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict):
        yield from object_schemas(node["items"], root, f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from object_schemas(node["additionalProperties"], root, f"{path}.*")


def test_every_value_of_values_yaml_is_in_the_schema() -> None:
    root = schema()
    missing = [path for path in value_paths(values()) if schema_at(path, root) is None]
    assert missing == [], f"values.yaml keys values.schema.json does not describe: {missing}"


def test_every_object_in_the_schema_refuses_unknown_keys() -> None:
    open_objects = [path for path, node in object_schemas(schema(), schema(), "")
                    if path not in FREE_FORM and node.get("additionalProperties") is not False]
    assert open_objects == [], f"objects without additionalProperties: false (or add them to FREE_FORM): {open_objects}"


def test_the_free_form_list_names_only_objects_the_schema_has() -> None:
    # A stale entry would silently allow-list a path somebody adds later.
    found = {path for path, _ in object_schemas(schema(), schema(), "")}
    assert FREE_FORM - found == set()


def test_the_defaults_satisfy_the_schema() -> None:
    jsonschema.Draft7Validator(schema()).validate(values())


def test_values_yaml_has_each_top_level_key_once() -> None:
    # PyYAML keeps the last of two equal keys silently; so does helm: the first one's values would be lost.
    class Strict(yaml.SafeLoader):
        pass

    def no_duplicates(loader: Strict, node: yaml.MappingNode) -> dict[Any, Any]:
        keys = Counter(loader.construct_object(key) for key, _ in node.value)
        twice = sorted(key for key, count in keys.items() if count > 1)
        assert twice == [], f"keys given twice in the mapping at line {node.start_mark.line + 1}: {twice}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, no_duplicates)
    assert yaml.load((CHART / "values.yaml").read_text(), Loader=Strict)


def test_every_top_level_value_is_listed_in_the_schema_and_nothing_more() -> None:
    assert set(schema()["properties"]) == set(values())

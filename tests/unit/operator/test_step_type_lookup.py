"""A run's first pass may come before the StepType watch's first list (right after the operator starts): a type
missing from the cache is read live before anything is refused, and only a type that really is missing or
unusable fails the run."""

from __future__ import annotations

import asyncio
from typing import Any

from towline.api.steptype import ResolvedStepType
from towline.handlers.context import Definitions
from towline.handlers.steptypes import catalog_of, step_types_of
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog
from towline.validation.codesteps import CodeStepPolicy
from towline.validation.steptypes import StepImagePolicy, check_step_type

POLICY = StepImagePolicy(allowed_prefixes=("localhost/towline-steps/",))
TYPE_BODY = {"apiVersion": "towline.dev/v1alpha1", "kind": "StepType",
             "metadata": {"name": "probe", "namespace": "team", "uid": "u", "generation": 1},
             "spec": {"image": "localhost/towline-steps/tcp-probe:dev",
                      "inputs": {"type": "object", "properties": {"message": {"type": "string"}}}}}
SPEC = {"steps": [{"id": "a", "action": "steptype/probe", "with": {"message": "m"}},
                  {"id": "b", "action": "clustersteptype/gone", "needs": ["a"]}]}


class Api:
    def __init__(self, bodies: dict[str, dict[str, Any]]) -> None:
        self.bodies = bodies
        self.paths: list[str] = []

    async def get(self, path: str) -> dict[str, Any] | None:
        self.paths.append(path)
        return self.bodies.get(path)


DEFINITIONS = Definitions(
    catalog=connector_catalog(), code_steps=CodeStepPolicy(),
    step_types_for=lambda namespace: {},  # the cache has not listed yet
    check_step_type=lambda body: check_step_type(body, POLICY),
)


def test_a_type_the_cache_lacks_is_read_live_and_a_missing_one_stays_missing() -> None:
    api = Api({"/apis/towline.dev/v1alpha1/namespaces/team/steptypes/probe": TYPE_BODY})
    found = asyncio.run(step_types_of(api, DEFINITIONS, "team", SPEC))  # type: ignore[arg-type]
    assert isinstance(found["steptype/probe"], ResolvedStepType)
    assert "clustersteptype/gone" not in found
    assert sorted(api.paths) == ["/apis/towline.dev/v1alpha1/clustersteptypes/gone",
                                 "/apis/towline.dev/v1alpha1/namespaces/team/steptypes/probe"]
    _, errors = validate_workflow_manifest(SPEC, catalog_of(DEFINITIONS, "team", found))
    assert [(e.field, e.message) for e in errors] == [(
        "spec.steps[1].action",
        "clustersteptype/gone is not registered; register it (kubectl apply -f its manifest) or fix the name")]

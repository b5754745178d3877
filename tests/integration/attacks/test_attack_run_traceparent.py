"""Attacks through a run's towline.dev/traceparent: a runner may name a trace, well formed, once, and nothing more.

What the annotation can do is make the run's spans join the trace it names (docs/runtime.md, "Traces"); the
operator ignores a value it cannot parse (tests/unit/engine/test_engine_traces.py). The API server admits only a
W3C version-00 value when the run is created (policy towline-run-requester) and keeps it as created
(towline-run-updates).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.integration.attacks.attack_support import create_as, patch_as, refused, run_manifest
from tests.integration.support import get

from towline_dev.controlplane import ControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

ANNOTATION = "towline.dev/traceparent"
WELL_FORMED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
MALFORMED = {
    "uppercase": WELL_FORMED.upper(),
    "trailing-data": WELL_FORMED + "-" + "x" * 4000,
    "another-version": "ff" + WELL_FORMED[2:],
    "not-hex": "00-" + "z" * 32 + "-00f067aa0ba902b7-01",
    "a-payload": '{"params": "smuggled"}',
}


def traced_run(namespace: str, name: str, value: str) -> dict[str, Any]:
    manifest = run_manifest(namespace, "gated", name, "alice")
    manifest["metadata"]["annotations"] = {ANNOTATION: value}
    return manifest


@pytest.mark.parametrize("value", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_runner_can_name_only_a_well_formed_trace(
    towline_installed: ControlPlane, team_namespace: str, value: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    refused(create_as(cluster, "alice", traced_run(ns, "alices-run", value), "--dry-run=server"),
            f"metadata.annotations[{ANNOTATION}] must be a W3C traceparent")
    admitted = create_as(cluster, "alice", traced_run(ns, "alices-run", WELL_FORMED), "--dry-run=server")
    assert admitted.returncode == 0, admitted.stderr


def test_nobody_but_the_creator_chooses_a_runs_trace(towline_installed: ControlPlane, team_namespace: str) -> None:
    cluster, ns = towline_installed, team_namespace
    assert create_as(cluster, "alice", traced_run(ns, "alices-run", WELL_FORMED)).returncode == 0
    other = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    for user in ("carol", "alice"):
        for metadata in ({"annotations": {ANNOTATION: other}}, {"annotations": {ANNOTATION: None}}):
            refused(patch_as(cluster, user, "workflowrun", "alices-run", ns, {"metadata": metadata}),
                    "other annotations cannot be added, changed or removed")
    assert create_as(cluster, "alice", run_manifest(ns, "gated", "untraced", "alice")).returncode == 0
    refused(patch_as(cluster, "carol", "workflowrun", "untraced", ns, {"metadata": {"annotations": {
        ANNOTATION: WELL_FORMED}}}), "other annotations cannot be added, changed or removed")
    found = get(cluster, "workflowruns.towline.dev", "alices-run", ns)
    assert found is not None and found["metadata"]["annotations"][ANNOTATION] == WELL_FORMED

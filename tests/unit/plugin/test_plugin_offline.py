"""`kubectl towline validate` and the pure parts of the plugin: params, retry manifests, export, graphs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from towline.plugin import graph, manifests, render
from towline.plugin.cli import main
from towline.plugin.offline import validate_files
from towline.plugin.runtree import run_tree, step_nodes
from towline.validation import validate_workflow_manifest
from towline.validation.catalog import connector_catalog

EXAMPLES = sorted(str(p) for p in Path(__file__).parents[3].joinpath("examples").glob("*.yaml"))
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

BROKEN = """\
apiVersion: towline.dev/v1alpha1
kind: Workflow
metadata: {name: broken}
spec:
  steps:
    - {id: a, action: http.request, needs: [b], with: {url: "https://example.com"}}
    - {id: b, action: http.request, needs: [a], with: {url: "https://example.com"}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
"""


def test_every_example_is_valid_offline() -> None:
    lines, problems = validate_files(EXAMPLES)
    documents = sum(len([d for d in yaml.safe_load_all(Path(path).read_text()) if d]) for path in EXAMPLES)
    assert problems == 0 and len(lines) == documents
    assert main(["validate", *EXAMPLES]) == 0


def test_validate_reports_exactly_the_operators_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    first = yaml.safe_load(BROKEN.split("---", maxsplit=1)[0])
    _, errors = validate_workflow_manifest(first["spec"], connector_catalog())
    assert errors, "the operator refuses the cycle"
    for error in errors:
        assert error.message in out
    assert "skipped (ConfigMap is not a Workflow)" in out


def test_a_missing_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    lines, problems = validate_files([str(tmp_path / "nope.yaml")])
    assert problems == 1 and "cannot read" in lines[0]


def test_params_are_json_values_or_strings() -> None:
    assert manifests.parse_params(["n=30", "env=prod", "flags=[1,2]", "on=true"]) == {
        "n": 30, "env": "prod", "flags": [1, 2], "on": True}
    with pytest.raises(manifests.UsageError, match="NAME=VALUE"):
        manifests.parse_params(["novalue"])


def finished_run() -> dict[str, Any]:
    return {
        "metadata": {"name": "sync-abc"},
        "spec": {"workflowRef": {"name": "sync"}, "requestedBy": "carol"},
        "status": {
            "phase": "Failed",
            "workflowSpec": {"steps": [
                {"id": "fetch", "action": "http.request"},
                {"id": "review", "needs": ["fetch"], "approval": {"approvers": {"users": ["bob"]}}},
                {"id": "shape", "needs": ["fetch"], "action": "data.transform"},
                {"id": "push", "needs": ["shape", "review"], "action": "http.request"},
                {"id": "after", "needs": ["push"], "action": "http.request"},
            ]},
            "steps": [
                {"id": "fetch", "phase": "Succeeded", "startedAt": "2026-11-30T11:59:00Z",
                 "finishedAt": "2026-11-30T11:59:01.5Z", "attempt": 1},
                {"id": "review", "phase": "Succeeded", "decidedBy": "bob"},
                {"id": "shape", "phase": "Succeeded", "attempt": 2, "history": [{"attempt": 1}]},
                {"id": "push", "phase": "Failed", "errorClass": "permanent", "message": "quota"},
                {"id": "after", "phase": "Skipped", "reason": "NeedFailed"},
            ],
        },
    }


def test_retry_reuses_succeeded_steps_but_never_an_approval() -> None:
    body = manifests.retry_manifest(finished_run(), "alice")
    assert body["spec"] == {"workflowRef": {"name": "sync"}, "requestedBy": "alice",
                            "retryOf": {"run": "sync-abc", "reuse": ["fetch", "shape"]}}
    assert body["metadata"] == {"generateName": "sync-"}


def test_export_drops_status_server_and_gitops_metadata() -> None:
    server = {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "w", "namespace": "team", "uid": "u", "resourceVersion": "7", "generation": 2,
                     "creationTimestamp": "2026-11-30T00:00:00Z", "managedFields": [{}],
                     "labels": {"team": "a", "app.kubernetes.io/instance": "towline-examples",
                                "kustomize.toolkit.fluxcd.io/name": "examples",
                                "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
                     "annotations": {"argocd.argoproj.io/tracking-id": "x:towline.dev/Workflow:team/w",
                                     "kubectl.kubernetes.io/last-applied-configuration": "{}", "owner": "ops"}},
        "spec": {"steps": [{"id": "a", "action": "http.request"}]},
        "status": {"conditions": []},
    }
    assert manifests.clean_workflow(server) == {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "w", "namespace": "team", "labels": {"team": "a"}, "annotations": {"owner": "ops"}},
        "spec": {"steps": [{"id": "a", "action": "http.request"}]},
    }


def test_status_tree_shows_states_attempts_durations_errors_and_approvers() -> None:
    tree = render.status_tree(run_tree(finished_run()), NOW)
    lines = tree.splitlines()
    assert lines[0] == "Run sync-abc  workflow sync  Failed"
    assert any("fetch" in line and "Succeeded  attempts 1  1.5s" in line for line in lines)
    assert any("review" in line and "approved by bob" in line for line in lines)
    assert any("shape" in line and "attempts 2" in line for line in lines)
    assert any("push" in line and "error permanent" in line and "- quota" in line for line in lines)
    assert lines[-1].startswith("  └─ after")


def test_run_graph_colours_steps_by_state() -> None:
    drawn = graph.graph_of(run_tree(finished_run()).nodes)
    text = graph.dot(drawn, "sync-abc")
    assert f'push [label="push\\nhttp.request\\nFailed", fillcolor="{graph.PHASE_COLOURS["Failed"]}"' in text
    assert "review [label=" in text and "shape=hexagon" in text
    assert "shape -> push;" in text and "review -> push;" in text
    chart = graph.mermaid(drawn)
    assert "class fetch,review,shape succeeded" in chart and "class push failed" in chart


def test_policy_gates_are_drawn_between_the_step_and_its_needs() -> None:
    spec = {"steps": [{"id": "a", "action": "http.request"}, {"id": "b", "needs": ["a"], "action": "crm.update"}]}
    states = [{"id": "a", "phase": "Succeeded"}, {"id": "b__gate", "gateFor": "b", "phase": "Running"}]
    edges = graph.graph_of(step_nodes(spec, states)).edges
    assert edges == [("a", "b__gate"), ("b__gate", "b")]

"""Workflow outputs on the real node: a two-step run records spec.outputs in status.outputs, and
`kubectl towline run --wait -o json` prints the finished run with them; `status` shows them too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.pluginsupport import ok, towline
from tests.integration.support import apply, get

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]


def release_with_outputs(namespace: str) -> dict[str, Any]:
    transform = {"action": "data.transform"}
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "release", "namespace": namespace},
        "spec": {
            "params": [{"name": "env", "type": "string", "default": "staging"}],
            "steps": [
                {"id": "build", **transform, "with": {"data": {"tag": "1.4.2"}, "fields": {"version": "data.tag"}}},
                {"id": "deploy", "needs": ["build"], **transform,
                 "with": {"data": {"v": "${{ steps.build.output.version }}"},
                          "fields": {"url": "'https://app.example.com/' + data.v"}}},
            ],
            "outputs": {"version": "steps.build.output.version",
                        "url": "steps.deploy.output.url + '?env=' + params.env"},
        },
    }


def test_a_two_step_run_records_its_outputs_and_run_wait_prints_them(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, release_with_outputs(ns))
    result = towline(cluster, ns, "run", "release", "-p", "env=prod", "--wait", "-o", "json")
    printed = json.loads(ok(result))  # stdout is the finished run alone; "created" went to stderr
    assert "created (requested by carol)" in result.stderr
    expected = {"version": "1.4.2", "url": "https://app.example.com/1.4.2?env=prod"}
    assert printed["status"]["phase"] == "Succeeded"
    assert printed["status"]["outputs"] == expected
    name = printed["metadata"]["name"]
    stored = get(cluster, "workflowruns.towline.dev", name, ns)
    assert stored is not None and stored["status"]["outputs"] == expected
    assert 'Outputs\n  url: "https://app.example.com/1.4.2?env=prod"\n  version: "1.4.2"' in ok(
        towline(cluster, ns, "status", name))

"""Attacks with hostile inputs: too deep, too big, too long a name. Each is refused with a reason, and
nobody else's run notices."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.integration.attacks.attack_support import (
    AS_INGRESS,
    INGRESS,
    RUNS,
    create_as,
    echo_workflow,
    install,
    jobs_of,
    refused,
    run_manifest,
)
from tests.integration.support import bind_role, get, step_status, wait_for_phase

from towline.api.run import MAX_INPUT_BYTES, MAX_INPUT_DEPTH, MAX_INPUT_ITEMS
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]


def nested_json(depth: int) -> str:
    """`{"x":{"x":...1...}}`, written as text: Python's own json module gives up near 1,000 levels."""
    return '{"x":' * depth + "1" + "}" * depth


def create_raw(cluster: ControlPlane, user: str, text: str, *extra: str) -> Any:
    return cluster.kubectl("create", "-f", "-", *extra, stdin=text, user=user, check=False)


def assert_others_still_run(cluster: ControlPlane, ns: str, name: str) -> None:
    assert create_as(cluster, "carol", run_manifest(ns, "echo", name, "carol", params={"who": name})).returncode == 0
    done = wait_for_phase(cluster, ns, name, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert step_status(done, "deploy")["output"]["who"] == name


@pytest.mark.parametrize("depth", [1500, MAX_INPUT_DEPTH + 1])
def test_deeply_nested_params_are_refused_by_the_api_server(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, depth: int
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    manifest = json.dumps(run_manifest(ns, "echo", "deep", "carol", params={"who": "__DEEP__"}))
    result = create_raw(cluster, "carol", manifest.replace('"__DEEP__"', nested_json(depth)))
    refused(result, f"spec.params nests objects and lists more than {MAX_INPUT_DEPTH} levels deep")
    assert get(cluster, RUNS, "deep", ns) is None
    assert_others_still_run(cluster, ns, "after-deep")


def test_a_list_longer_than_the_limit_is_refused_by_the_api_server(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """The API server's CEL needs time quadratic in a list's length to walk it: long lists are refused by count."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    long = run_manifest(ns, "echo", "long", "carol", params={"who": "x", "ids": list(range(MAX_INPUT_ITEMS + 1))})
    refused(create_as(cluster, "carol", long), f"holds one with more than {MAX_INPUT_ITEMS} entries")
    assert get(cluster, RUNS, "long", ns) is None
    fits = run_manifest(ns, "echo", "fits", "carol", params={"who": "fits"})
    fits["spec"]["params"]["ids"] = list(range(MAX_INPUT_ITEMS))
    created = create_as(cluster, "carol", fits)
    assert created.returncode == 0, created.stderr


def test_deeply_nested_webhook_data_is_refused_even_from_the_ingress(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """The depth rule holds for every creator: the ingress passes on what a sender posted."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    bind_role(cluster, ns, "towline-runner", users=(INGRESS,))
    manifest = json.dumps(run_manifest(ns, "echo", "deep-hook", INGRESS,
                                       trigger={"type": "webhook", "name": "hook", "data": {"body": "__DEEP__"}}))
    result = create_raw(cluster, "admin", manifest.replace('"__DEEP__"', nested_json(1500)), *AS_INGRESS)
    refused(result, f"spec.trigger.data nests objects and lists more than {MAX_INPUT_DEPTH} levels deep")
    assert get(cluster, RUNS, "deep-hook", ns) is None


def test_a_deeply_nested_workflow_is_refused(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    workflow = echo_workflow(ns, "deep-workflow")
    workflow["spec"]["steps"][0]["with"]["data"]["blob"] = "__DEEP__"
    result = create_raw(cluster, "admin", json.dumps(workflow).replace('"__DEEP__"', nested_json(1500)))
    refused(result, "spec nests objects and lists more than 64 levels deep")


def test_oversized_params_fail_the_run_with_the_fix_and_start_no_job(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    big = run_manifest(ns, "echo", "big", "carol", params={"who": "x" * (MAX_INPUT_BYTES + 1)})
    assert create_as(cluster, "carol", big).returncode == 0
    done = wait_for_phase(cluster, ns, "big", {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Failed"
    assert f"more than {MAX_INPUT_BYTES}; pass a reference" in done["status"]["message"], done["status"]
    assert done["status"].get("params", {}) == {}, "the oversized value is not copied into status"
    assert jobs_of(cluster, ns, "big") == []
    assert_others_still_run(cluster, ns, "after-big")


def test_a_run_name_too_long_for_a_label_is_refused(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    """A label value holds 63 characters; such a run could never create its Jobs."""
    cluster, ns = towline_installed, team_namespace
    install(cluster, echo_workflow(ns))
    name = "r" * 64
    refused(create_as(cluster, "carol", run_manifest(ns, "echo", name, "carol")),
            "metadata.name", "may not be more than 63")
    assert get(cluster, RUNS, name, ns) is None


def test_a_workflow_name_too_long_for_a_label_is_refused(
    towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    result = create_raw(cluster, "admin", json.dumps(echo_workflow(ns, "w" * 64)))
    refused(result, "metadata.name", "may not be more than 63")

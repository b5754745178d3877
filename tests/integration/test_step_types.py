"""User step types on the real node: the two examples (Go, and Python with the SDK) run like built-ins.

Each test registers an example's own manifest (examples/step-types/*/steptype.yaml), changed only where
the test needs it (the egress port of its test server), and runs workflows through the operator: inputs
checked before anything runs, outputs flowing to the next step, a bound credential slot mounted with
only its key, egress to allowHosts only (a raw connect from the user's container, no guard in the way),
retries by error class, and the idempotency key reaching the container.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
import yaml
from tests.integration.support import (
    TEST_SERVER_ADDRESS,
    TEST_SERVER_ALIAS,
    ScriptedServer,
    apply,
    get,
    list_objects,
    ready,
    start_run,
    step_log,
    step_status,
    wait_for,
    wait_for_phase,
    workflow,
)

from towline_dev import REPO_ROOT
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

EXAMPLES = REPO_ROOT / "examples" / "step-types"
TOKEN = "tcp-probe-token-5f1e"
OTHER = "never-mounted-9a7c"


def example_type(directory: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """The example's StepType manifest in `namespace`, with `spec` fields replaced."""
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / directory / "steptype.yaml").read_text())
    manifest = copy.deepcopy(manifest)
    manifest["metadata"]["namespace"] = namespace
    manifest["spec"].update(spec)
    return manifest


def register(cluster: ControlPlane, manifest: dict[str, Any]) -> None:
    apply(cluster, manifest)
    verdict = ready(cluster, "steptypes.towline.dev", manifest["metadata"]["name"], manifest["metadata"]["namespace"])
    assert verdict["status"] == "True", verdict


def server_port(server: ScriptedServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def test_a_bad_with_keeps_the_workflow_not_ready_with_the_field_path_and_revalidation_follows_the_type(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    register(cluster, example_type("tcp-probe-go", ns))
    register(cluster, example_type("greeter-python", ns))
    bad = workflow(ns, "typed", [
        {"id": "probe", "action": "steptype/tcp-probe", "with": {"message": "hi", "fail": "sometimes"}},
        {"id": "greet", "action": "steptype/greeter", "needs": ["probe"], "with": {"name": 42}},
    ])
    apply(cluster, bad)
    verdict = ready(cluster, "workflows.towline.dev", "typed", ns)
    assert verdict["status"] == "False", verdict
    errors = (get(cluster, "workflows.towline.dev", "typed", ns) or {})["status"]["validationErrors"]
    fields = {error["field"]: error["message"] for error in errors}
    assert set(fields) == {"spec.steps[0].with.fail", "spec.steps[1].with.name"}, errors
    assert "is not one of" in fields["spec.steps[0].with.fail"]
    assert "is not of type 'string'" in fields["spec.steps[1].with.name"]
    bad["spec"]["steps"][0]["with"]["fail"] = "transient"
    bad["spec"]["steps"][1]["with"]["name"] = "Ada"
    apply(cluster, bad)
    wait_for("the fixed workflow to be Ready",
             lambda: ready(cluster, "workflows.towline.dev", "typed", ns)["status"] == "True")
    # The type goes: every Workflow that may name it is validated again.
    cluster.kubectl("delete", "steptype", "greeter", "-n", ns)

    def refused_again() -> list[dict[str, Any]] | None:
        status = (get(cluster, "workflows.towline.dev", "typed", ns) or {}).get("status") or {}
        return status.get("validationErrors") or None

    errors = wait_for("the Workflow to be validated again without its type", refused_again)
    assert [error["field"] for error in errors] == ["spec.steps[1].action"], errors
    assert "steptype/greeter" in errors[0]["message"]


def test_outputs_flow_to_the_next_step_and_the_idempotency_key_reaches_the_container(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    register(cluster, example_type("tcp-probe-go", ns))
    register(cluster, example_type("greeter-python", ns))
    apply(cluster, workflow(ns, "chain", [
        {"id": "probe", "action": "steptype/tcp-probe", "with": {"message": "Grace"}},
        {"id": "greet", "action": "steptype/greeter", "needs": ["probe"],
         "with": {"name": "${{ steps.probe.output.message }}"}},
    ]))
    ready(cluster, "workflows.towline.dev", "chain", ns)
    run = start_run(cluster, ns, "chain")
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    probe, greet = step_status(done, "probe"), step_status(done, "greet")
    assert probe["output"]["stepType"] == "steptype/tcp-probe"
    assert probe["output"]["idempotencyKey"] == probe["idempotencyKey"]
    assert greet["output"]["idempotencyKey"] == greet["idempotencyKey"] != probe["idempotencyKey"]
    assert "Grace" in greet["output"]["greeting"]
    for step in (probe, greet):  # what ran, by digest, as the kubelet reported it
        assert "sha256:" in (step["history"][-1].get("image") or ""), step["history"]
    snapshot = done["status"]["workflowSpec"]["stepTypes"]
    assert snapshot["steptype/tcp-probe"]["spec"]["image"] == "localhost/towline-steps/tcp-probe:dev"
    assert snapshot["steptype/greeter"]["kind"] == "StepType" and snapshot["steptype/greeter"]["uid"]


def test_a_bound_slot_mounts_only_its_declared_key_and_nothing_else_of_the_namespace(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    register(cluster, example_type("tcp-probe-go", ns))
    cluster.kubectl("create", "secret", "generic", "probe-api", "-n", ns,
                    f"--from-literal=token={TOKEN}", f"--from-literal=admin={OTHER}")
    cluster.kubectl("create", "secret", "generic", "unrelated", "-n", ns, f"--from-literal=token={OTHER}")
    apply(cluster, workflow(ns, "bound", [
        {"id": "probe", "action": "steptype/tcp-probe", "with": {"message": "m"}, "credentials": {"api": "probe-api"},
         "allowHosts": [TEST_SERVER_ADDRESS]},
        {"id": "unbound", "action": "steptype/tcp-probe", "with": {"message": "m"}},
    ]))
    ready(cluster, "workflows.towline.dev", "bound", ns)
    run = start_run(cluster, ns, "bound")
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    bound, unbound = step_status(done, "probe")["output"], step_status(done, "unbound")["output"]
    assert bound["credential"]["keys"] == ["token"], bound
    assert bound["credential"]["tokenSha256Prefix"] == hashlib.sha256(TOKEN.encode()).hexdigest()[:8]
    assert unbound["credential"]["bound"] is False, unbound
    assert TOKEN not in json.dumps(done) and OTHER not in json.dumps(done)
    pods = list_objects(cluster, "pods", ns, f"towline.dev/run={run}")
    secret_names = {v["secret"]["secretName"] for p in pods for v in p["spec"]["volumes"] if "secret" in v}
    assert secret_names == {"probe-api"}


def test_egress_reaches_allow_hosts_on_the_types_ports_and_nothing_else(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as server:
        port = server_port(server)
        register(cluster, example_type("tcp-probe-go", ns, egress={"ports": [port]}))
        apply(cluster, workflow(ns, "egress", [
            {"id": "allowed", "action": "steptype/tcp-probe", "allowHosts": [TEST_SERVER_ADDRESS],
             "with": {"message": "m", "connect": f"{TEST_SERVER_ADDRESS}:{port}"}},
            {"id": "other_host", "action": "steptype/tcp-probe", "allowHosts": [TEST_SERVER_ADDRESS],
             "with": {"message": "m", "connect": f"{TEST_SERVER_ALIAS}:{port}"}},
        ]))
        ready(cluster, "workflows.towline.dev", "egress", ns)
        run = start_run(cluster, ns, "egress")
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    allowed, other = step_status(done, "allowed")["output"], step_status(done, "other_host")["output"]
    assert allowed["connect"]["connected"] is True, allowed
    assert other["connect"]["connected"] is False, other


def test_retries_follow_the_types_policy_by_error_class(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    register(cluster, example_type("tcp-probe-go", ns))
    apply(cluster, workflow(ns, "retries", [
        {"id": "flaky", "action": "steptype/tcp-probe", "with": {"message": "m", "fail": "transient"}},
        {"id": "broken", "action": "steptype/tcp-probe", "with": {"message": "m", "fail": "permanent"}},
    ]))
    ready(cluster, "workflows.towline.dev", "retries", ns)
    run = start_run(cluster, ns, "retries")
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"}, timeout=240)
    flaky, broken = step_status(done, "flaky"), step_status(done, "broken")
    assert (flaky["phase"], flaky["errorClass"], flaky["attempt"]) == ("Failed", "transient", 3), flaky
    assert (broken["phase"], broken["errorClass"], broken["attempt"]) == ("Failed", "permanent", 1), broken


@pytest.mark.parametrize(("mode", "expected"), [
    ("invalid-result", "'ok' must be true or false"),
    ("oversized-result", "likely cut by the kubelet, which keeps at most 4096 bytes"),
    ("no-result", "exited with code 75 without writing a result document"),
])
def test_a_container_that_breaks_the_protocol_fails_its_step_clearly_and_the_operator_carries_on(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, mode: str,
    expected: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    register(cluster, example_type("tcp-probe-go", ns, retry={"limit": 0}))
    apply(cluster, workflow(ns, "hostile", [
        {"id": "bad", "action": "steptype/tcp-probe", "with": {"message": "m", "fail": mode}},
        {"id": "after", "action": "steptype/tcp-probe", "with": {"message": "still here"}},
    ]))
    ready(cluster, "workflows.towline.dev", "hostile", ns)
    run = start_run(cluster, ns, "hostile")
    done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
    bad, after = step_status(done, "bad"), step_status(done, "after")
    # The container's own log says why when the message is not the one expected (a Go runtime error exits 2).
    assert bad["phase"] == "Failed" and expected in (bad.get("message") or ""), (
        bad, step_log(cluster, ns, run, "bad"))
    assert after["phase"] == "Succeeded" and after["output"]["message"] == "still here", after
    assert towline_operator.process is not None and towline_operator.process.poll() is None


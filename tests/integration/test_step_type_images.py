"""The Go example step type (examples/step-types/tcp-probe-go) as the node runs it, without the operator.

Its image is built by the project's tooling (towline_dev.stepimages) and loaded into the
node with the others. Each case is a plain pod laid out as the step protocol v1 lays out
a step's container: inputs.json from a ConfigMap at /var/run/towline/step, the credential
slot `api` as one key of a Secret, the TOWLINE_* environment, the result document as the
termination message, in a namespace enforcing Pod Security `restricted`, on a read-only
root with no ServiceAccount token and nothing writable at all. What the kubelet reports as
the termination message is read with the protocol's own strict reader, as the operator
reads it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.integration.nodesupport import RESTRICTED_CONTAINER_SECURITY, create
from tests.integration.support import wait_for
from tests.workers import namespace_prefix

from towline_dev.binaries import cache_root
from towline_dev.controlplane import ControlPlane
from towline_dev.images import REPO_ROOT
from towline_dev.node.realnode import NodeCluster
from towline_dev.ocilayout import iter_layer_members, read_archive
from towline_dev.stepimages import TCP_PROBE_IMAGE, ensure_step_type_images
from towline_step.protocol import RESULT_LIMIT_BYTES, ErrorClass, ResultDocument, read_result_message

pytestmark = [pytest.mark.integration, pytest.mark.local_only]

STEP_DIR = "/var/run/towline/step"
CREDENTIALS_DIR = "/var/run/towline/credentials"
CANARY = "tcp-probe-canary-5c1e9a-never-in-a-result"
OTHER_KEY_CANARY = "tcp-probe-other-key-8d02f4"


@dataclass(frozen=True)
class Case:
    inputs: dict[str, Any]
    bind_credential: bool = False
    idempotency_key: str = field(default_factory=lambda: f"wf-{secrets.token_hex(4)}-probe-1")


CASES = {
    "ok": Case({"message": "hello from a ConfigMap", "connect": "CLUSTER_DNS:53"}, bind_credential=True),
    "unbound": Case({"connect": "127.0.0.1:1"}),
    "transient": Case({"fail": "transient"}),
    "permanent": Case({"fail": "permanent"}),
    "bad-input": Case({"fail": "sometimes"}),
    "invalid-result": Case({"fail": "invalid-result"}),
    "oversized-result": Case({"fail": "oversized-result"}),
    "no-result": Case({"fail": "no-result"}),
}


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    message: str
    logs: str

    @property
    def result(self) -> ResultDocument | None:
        return read_result_message(self.message)


def _pod(name: str, namespace: str, case: Case) -> dict[str, Any]:
    env = {
        "TOWLINE_PROTOCOL_VERSION": "1",
        "TOWLINE_STEP_TYPE": "steptype/tcp-probe",
        "TOWLINE_INPUTS_PATH": f"{STEP_DIR}/inputs.json",
        "TOWLINE_CREDENTIALS_DIR": CREDENTIALS_DIR,
        "TOWLINE_RESULT_PATH": "/dev/termination-log",
        "TOWLINE_IDEMPOTENCY_KEY": case.idempotency_key,
        "TOWLINE_DEADLINE_SECONDS": "25",
        "TOWLINE_ALLOW_HOSTS": "[]",
    }
    volumes: list[dict[str, Any]] = [{"name": "inputs", "configMap": {"name": name}}]
    mounts: list[dict[str, Any]] = [{"name": "inputs", "mountPath": STEP_DIR, "readOnly": True}]
    if case.bind_credential:
        # Only the slot's declared key of a Secret that holds two, as the operator mounts it.
        volumes.append({"name": "cred-api", "secret": {"secretName": "api-token", "defaultMode": 0o440,
                                                       "items": [{"key": "token", "path": "token"}]}})
        mounts.append({"name": "cred-api", "mountPath": f"{CREDENTIALS_DIR}/api", "readOnly": True})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "activeDeadlineSeconds": 30,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "step", "image": TCP_PROBE_IMAGE, "imagePullPolicy": "Never",
                "env": [{"name": key, "value": value} for key, value in env.items()],
                "volumeMounts": mounts,
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
                "securityContext": dict(RESTRICTED_CONTAINER_SECURITY),
            }],
            "volumes": volumes,
        },
    }


def _wait_terminated(plane: ControlPlane, namespace: str, names: set[str], timeout: float = 120) -> dict[str, Any]:
    """Each pod's terminated state, once every one of them has its container terminated."""
    terminated: dict[str, Any] = {}

    def all_terminated() -> dict[str, Any] | None:
        nonlocal terminated
        pods = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
        terminated = {}
        for pod in pods:
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if statuses and "terminated" in statuses[0].get("state", {}):
                terminated[pod["metadata"]["name"]] = statuses[0]["state"]["terminated"]
        return terminated if names <= set(terminated) else None

    found: dict[str, Any] = wait_for("every probe pod's container to terminate", all_terminated, timeout, interval=0.25,
                                     explain=lambda: f"not terminated: {sorted(names - set(terminated))}")
    return found


@pytest.fixture(scope="module")
def outcomes(real_node_with_images: NodeCluster) -> Iterator[dict[str, Outcome]]:
    """Every case run once, all at the same time, in a namespace of this worker's that enforces `restricted`."""
    plane = real_node_with_images.plane
    assert plane is not None
    namespace = f"{namespace_prefix()}step-type-images-{secrets.token_hex(3)}"
    create(plane, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {
        "towline.dev/test": "true",
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
    }}})
    try:
        plane.kubectl("create", "secret", "generic", "api-token", "-n", namespace,
                      f"--from-literal=token={CANARY}", f"--from-literal=other={OTHER_KEY_CANARY}")
        dns = plane.kubectl("get", "service", "kube-dns", "-n", "kube-system",
                            "-o", "jsonpath={.spec.clusterIP}").stdout.strip()
        started = time.monotonic()
        for case_name, case in CASES.items():
            name = f"probe-{case_name}"
            inputs = json.loads(json.dumps(case.inputs).replace("CLUSTER_DNS", dns))
            create(plane, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                           "data": {"inputs.json": json.dumps(inputs)}})
            create(plane, _pod(name, namespace, case))
        terminated = _wait_terminated(plane, namespace, {f"probe-{case_name}" for case_name in CASES})
        print(f"\n[real node] {len(CASES)} tcp-probe pods created -> all terminated in "
              f"{time.monotonic() - started:.1f} s", file=sys.stderr)
        yield {
            case_name: Outcome(
                exit_code=terminated[f"probe-{case_name}"]["exitCode"],
                message=terminated[f"probe-{case_name}"].get("message", ""),
                logs=plane.kubectl("logs", "-n", namespace, f"probe-{case_name}").stdout,
            )
            for case_name in CASES
        }
    finally:
        plane.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def _output(outcome: Outcome) -> dict[str, Any]:
    result = outcome.result
    assert result is not None, f"not a result document: {outcome.message!r}"
    assert result.ok, f"{result.error_class}: {result.message}"
    assert isinstance(result.output, dict)
    return result.output


def test_step_succeeds_with_a_valid_result_document(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["ok"]
    assert outcome.exit_code == 0
    output = _output(outcome)
    assert output["message"] == "hello from a ConfigMap"
    assert output["stepType"] == "steptype/tcp-probe"
    assert output["protocolVersion"] == 1


def test_step_echoes_the_idempotency_key_from_its_environment(outcomes: dict[str, Outcome]) -> None:
    assert _output(outcomes["ok"])["idempotencyKey"] == CASES["ok"].idempotency_key
    assert _output(outcomes["unbound"])["idempotencyKey"] == CASES["unbound"].idempotency_key


def test_bound_slot_holds_only_its_declared_key_and_the_value_stays_inside(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["ok"]
    credential = _output(outcome)["credential"]
    assert credential["bound"] is True
    assert credential["keys"] == ["token"]
    assert credential["tokenPresent"] is True
    assert credential["tokenBytes"] == len(CANARY)
    assert credential["tokenSha256Prefix"] == hashlib.sha256(CANARY.encode()).hexdigest()[:8]
    for text in (outcome.message, outcome.logs):
        assert CANARY not in text
        assert OTHER_KEY_CANARY not in text


def test_unbound_slot_is_reported_absent(outcomes: dict[str, Outcome]) -> None:
    credential = _output(outcomes["unbound"])["credential"]
    assert (credential["bound"], credential["tokenPresent"], credential["keys"]) == (False, False, [])


def test_raw_connect_reports_a_reachable_and_a_refused_address(outcomes: dict[str, Outcome]) -> None:
    reached = _output(outcomes["ok"])["connect"]
    assert reached["connected"] is True, reached
    refused = _output(outcomes["unbound"])["connect"]
    assert (refused["connected"], refused["error"]) == (False, "refused")


@pytest.mark.parametrize(("case", "exit_code", "error_class", "retryable"), [
    ("transient", 75, ErrorClass.TRANSIENT, True),
    ("permanent", 1, ErrorClass.PERMANENT, False),
    ("bad-input", 2, ErrorClass.VALIDATION, False),
])
def test_failure_carries_its_error_class_and_exit_code(
    outcomes: dict[str, Outcome], case: str, exit_code: int, error_class: ErrorClass, retryable: bool
) -> None:
    outcome = outcomes[case]
    result = outcome.result
    assert outcome.exit_code == exit_code
    assert result is not None and not result.ok
    assert (result.error_class, result.retryable) == (error_class, retryable)
    assert result.message


def test_invalid_result_is_refused_by_the_strict_reader(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["invalid-result"]
    assert outcome.exit_code == 0, "the exit code claims success; only the document says otherwise"
    result = outcome.result
    assert result is not None and not result.ok
    assert result.error_class == ErrorClass.PERMANENT
    assert result.message is not None and "breaks the step protocol" in result.message and "'ok'" in result.message


def test_oversized_result_reaches_the_reader_as_its_last_4096_bytes_which_are_no_document(
    outcomes: dict[str, Outcome],
) -> None:
    """The step wrote twice the limit and exited 0; the kubelet keeps only the end of the file, so what the
    operator reads is not JSON at all: never a success, never the step's own document."""
    outcome = outcomes["oversized-result"]
    assert outcome.exit_code == 0
    assert len(outcome.message.encode()) == RESULT_LIMIT_BYTES
    assert outcome.message.endswith('xxx"}}'), "the tail of what the step wrote"
    assert outcome.result is None


def test_no_result_leaves_an_empty_termination_message(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["no-result"]
    assert outcome.exit_code == 75
    assert outcome.message == ""
    assert outcome.result is None


@pytest.fixture(scope="module")
def go_archive(real_node_with_images: NodeCluster) -> Path:
    return ensure_step_type_images(lambda message: None)[TCP_PROBE_IMAGE]


def test_go_image_is_the_static_binary_alone_run_as_65532(go_archive: Path) -> None:
    image = read_archive(go_archive)
    assert image.config["config"]["User"] == "65532:65532"
    assert image.config["config"]["Entrypoint"] == ["/tcp-probe"]
    files = {}
    for _, tar, member in iter_layer_members(image):
        if member.isfile():
            handle = tar.extractfile(member)
            assert handle is not None
            files[member.name.lstrip("./")] = handle.read()
    assert list(files) == ["tcp-probe"], "FROM scratch: no shell, no libc, nothing but the step"
    binary = files["tcp-probe"]
    assert binary.startswith(b"\x7fELF")
    assert b"ld-linux" not in binary, "a static binary needs no dynamic loader"
    for machine_path in (REPO_ROOT, cache_root()):
        assert str(machine_path).encode() not in binary, "-trimpath keeps this machine's paths out"

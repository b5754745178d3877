"""A step-type author's hostile JSON Schema fails her own type or step; the operator keeps serving everyone else.

Alice holds towline-step-type-author, towline-workflow-author and towline-runner in her namespace. Her
StepTypes' input schemas:

- refer to a file (`file://`): here a FIFO, whose reader blocks until somebody writes (jsonschema's
  default registry opens any reference with `urlopen`; `/dev/zero` got the operator OOM-killed);
- refer to a remote URL: here a tarpit that accepts and never answers (`urlopen` has no timeout);
- check her run's 40-character param with a catastrophic `pattern` (days of Python's backtracking `re`,
  on the operator's event loop, where every namespace's reconciles run).

The chart refuses the two references at admission. Created while that policy is off (the operator's own
check is what remains), the operator opens neither the file nor the URL and marks those types not Ready,
naming the field and the fix; the pattern (admitted: CEL cannot judge a regex) fails alice's step at once.
Meanwhile carol's run in another namespace goes from start to Succeeded, and the operator's liveness
endpoint answers every probe.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import secrets
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.attacks.attack_support import create_as, echo_workflow, install, refused, run_manifest
from tests.integration.conftest import free_port
from tests.integration.support import apply, bind_role, create, get, ready, step_status, wait_for, wait_for_phase
from tests.workers import namespace_prefix

from towline_dev import REPO_ROOT
from towline_dev.controlplane import ControlPlane
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("policies_enforced")]

EXAMPLE = REPO_ROOT / "examples" / "step-types" / "tcp-probe-go" / "steptype.yaml"
STEP_TYPES = "steptypes.towline.dev"
POLICY = "towline-step-type-schemas"
CATASTROPHIC = r"^([a-zA-Z0-9]+\s?)*$"
NEAR_MATCH = "a" * 39 + "!"
"""40 characters: Python's re explores about 2**39 ways to split the letters before giving up."""
ERIN_ROLES = ("towline-step-type-author", "towline-workflow-author", "towline-runner")


def hostile_type(namespace: str, name: str, x: dict[str, Any]) -> dict[str, Any]:
    manifest: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    manifest["metadata"] = {"name": name, "namespace": namespace}
    manifest["spec"]["inputs"] = {"type": "object", "properties": {"x": x}}
    manifest["spec"].pop("credentials", None)
    return manifest


def using(namespace: str, step_type: str) -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": f"uses-{step_type}", "namespace": namespace},
            "spec": {"params": [{"name": "p", "type": "string", "default": "a"}],
                     "steps": [{"id": "use", "action": f"steptype/{step_type}", "with": {"x": "${{ params.p }}"}}]}}


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.fixture
def alice(towline_installed: ControlPlane, namespace: str) -> str:
    for role in ERIN_ROLES:
        bind_role(towline_installed, namespace, role, users=("alice",))
    return namespace


def test_an_author_cannot_register_a_schema_that_refers_outside_itself_or_nests_too_deep(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, alice: str
) -> None:
    cluster, ns = towline_installed, alice
    attempts: dict[str, dict[str, Any]] = {
        "file-ref": {"$ref": "file:///dev/zero"},
        "remote-ref": {"$ref": "https://tarpit.example/schema.json"},
        "dynamic-ref": {"items": [{"anyOf": [{"$dynamicRef": "http://169.254.169.254/"}]}]},
    }
    for name, x in attempts.items():
        message = refused(create_as(cluster, "alice", hostile_type(ns, name, x)), POLICY, "points outside the schema")
        assert "spec.inputs" in message and "#/$defs/<name>" in message, message
    refused(create_as(cluster, "alice", hostile_type(ns, "deep", nested(20))), POLICY, "32 levels deep")
    # A reference inside the schema is what the fix says to write, and it is admitted.
    local = hostile_type(ns, "local-ref", {"$ref": "#/$defs/name"})
    local["spec"]["inputs"]["$defs"] = {"name": {"type": "string", "maxLength": 8}}
    assert create_as(cluster, "alice", local).returncode == 0
    assert ready(cluster, STEP_TYPES, "local-ref", ns)["status"] == "True"
    refused(cluster.kubectl("patch", STEP_TYPES, "local-ref", "-n", ns, "--type", "merge", "-p", json.dumps(
        {"spec": {"outputs": {"type": "object", "properties": {"y": {"$ref": "file:///etc/passwd"}}}}}),
        user="alice", check=False), POLICY, "spec.outputs")


@dataclass
class Liveness:
    """Probes the operator's /healthz as the chart's livenessProbe does (timeout 5 s), until stopped."""

    url: str
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def watch(self) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    if response.status == 200:
                        self.answered += 1
                    else:
                        self.failures.append(f"{time.strftime('%X')} HTTP {response.status}")
            except OSError as error:
                self.failures.append(f"{time.strftime('%X')} {error!r}")
            self.stop.wait(0.5)


@pytest.fixture
def probed_operator(towline_operator: OperatorProcess, tmp_path: Path) -> Iterator[tuple[OperatorProcess, Liveness]]:
    """The session operator, restarted with its health endpoint on, probed from start to end of the test."""
    towline_operator.stop()
    port = free_port()
    probed = replace(towline_operator, health_port=port, log_path=tmp_path / "operator.log", process=None).start()
    liveness = Liveness(f"http://127.0.0.1:{port}/healthz")

    def first_answer() -> bool:
        try:
            with urllib.request.urlopen(liveness.url, timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    thread = threading.Thread(target=liveness.watch, daemon=True)
    try:
        wait_for("the operator's liveness endpoint", first_answer, timeout=60)
        thread.start()
        yield probed, liveness
    finally:
        liveness.stop.set()
        if thread.is_alive():
            thread.join(timeout=10)
        probed.stop()
        towline_operator.start()


@pytest.fixture
def schema_policy_off(towline_installed: ControlPlane, alice: str) -> Iterator[None]:
    """The schema policy's binding deleted for one test (the operator's own check is what remains), then back."""
    cluster = towline_installed
    saved = json.loads(cluster.kubectl("get", "validatingadmissionpolicybinding", POLICY, "-o", "json").stdout)
    probe = hostile_type(alice, "probe", {"$ref": "file:///dev/zero"})
    cluster.kubectl("delete", "validatingadmissionpolicybinding", POLICY)
    try:
        wait_for("the schema policy to stop refusing", lambda: cluster.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe), check=False).returncode == 0)
        yield
    finally:
        meta = saved["metadata"]
        saved["metadata"] = {key: meta[key] for key in ("name", "labels") if key in meta}
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(saved))
        wait_for("the schema policy to be enforced again", lambda: cluster.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe), check=False).returncode != 0)


@pytest.fixture
def tarpit() -> Iterator[tuple[str, list[socket.socket]]]:
    """An HTTP URL whose server accepts connections and never answers (what `urlopen` would wait on forever)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def hold() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/schema.json", held
    server.shutdown(socket.SHUT_RDWR)
    server.close()
    for connection in held:
        connection.close()
    thread.join(timeout=5)


def opened_for_reading(fifo: Path) -> bool:
    """Whether a process holds the FIFO open for reading (or waits in open() for a writer)."""
    try:
        descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ENXIO:
            return False
        raise
    os.close(descriptor)
    return True


def victim_namespace(cluster: ControlPlane) -> Iterator[str]:
    name = f"{namespace_prefix()}schema-victim-{secrets.token_hex(3)}"
    create(cluster, {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": name, "labels": {"towline.dev/test": "true"}}})
    try:
        wait_for("the victim namespace's ServiceAccount", lambda: get(cluster, "serviceaccount", "default", name))
        bind_role(cluster, name, "towline-runner", users=("carol",))
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def carols_namespace(towline_installed: ControlPlane) -> Iterator[str]:
    yield from victim_namespace(towline_installed)


def step_type_ready(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return ready(cluster, STEP_TYPES, name, namespace)


@pytest.mark.exclusive  # deletes the cluster-wide binding of towline-step-type-schemas and restarts the operator
def test_hostile_schemas_fail_their_own_type_or_step_while_another_namespaces_run_succeeds(
    towline_installed: ControlPlane, probed_operator: tuple[OperatorProcess, Liveness], alice: str,
    carols_namespace: str, schema_policy_off: None, tarpit: tuple[str, list[socket.socket]], tmp_path: Path,
) -> None:
    cluster, ns, victim = towline_installed, alice, carols_namespace
    operator, liveness = probed_operator
    fifo = tmp_path / "schema.fifo"
    os.mkfifo(fifo)
    url, held = tarpit
    install(cluster, echo_workflow(victim))

    hostile: dict[str, dict[str, Any]] = {"file-ref": {"$ref": fifo.as_uri()}, "remote-ref": {"$ref": url},
                                          "backtracking": {"type": "string", "pattern": CATASTROPHIC}}
    for name, x in hostile.items():
        assert create_as(cluster, "alice", hostile_type(ns, name, x)).returncode == 0, name
        assert apply(cluster, using(ns, name), user="alice", check=False).returncode == 0, name
    started = time.monotonic()
    assert create_as(cluster, "alice", run_manifest(ns, "uses-backtracking", "catastrophic", "alice",
                                                   params={"p": NEAR_MATCH})).returncode == 0
    assert create_as(cluster, "carol", run_manifest(victim, "echo", "meanwhile", "carol",
                                                    params={"who": "carol"})).returncode == 0

    run = wait_for_phase(cluster, victim, "meanwhile", {"Succeeded", "Failed"}, timeout=180)
    print(f"\n[real node] carol's run beside alice's hostile step types: start to {run['status']['phase']} in "
          f"{time.monotonic() - started:.1f} s; liveness answered {liveness.answered} probes", file=sys.stderr)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert step_status(run, "deploy")["output"] == {"who": "carol"}

    # alice's own objects carry the failure, each naming the field and the fix.
    for name in ("file-ref", "remote-ref"):
        condition = step_type_ready(cluster, ns, name)
        assert condition["status"] == "False", condition
        assert "spec.inputs.properties.x.$ref" in condition["message"], condition
        assert "#/$defs/<name>" in condition["message"], condition
        workflow_ready = ready(cluster, "workflows.towline.dev", f"uses-{name}", ns)
        assert workflow_ready["status"] == "False" and "not Ready" in workflow_ready["message"], workflow_ready
    assert step_type_ready(cluster, ns, "backtracking")["status"] == "True"
    failed = wait_for_phase(cluster, ns, "catastrophic", {"Succeeded", "Failed"}, timeout=60)
    assert failed["status"]["phase"] == "Failed", failed["status"]
    message = step_status(failed, "use").get("message", "")
    assert "with.x" in message and "does not match" in message, message

    # Nothing was opened or fetched, and the operator answered every probe from start to end.
    assert not opened_for_reading(fifo)
    assert held == []
    assert operator.process is not None and operator.process.poll() is None
    assert liveness.answered > 0
    assert liveness.failures == [], liveness.failures

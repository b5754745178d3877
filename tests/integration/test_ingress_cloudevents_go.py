"""CloudEvents interop in Go, against the real ingress, operator and API server.

Senders and a receiver no one here wrote the encoding of: the CloudEvents SDK for Go (`cesdk`, our command over
the SDK's own HTTP client and message reader, towline_dev.cloudevents_go) and Knative Eventing's `heartbeats`
sample, unmodified, run as a Knative ContainerSource runs it (`K_SINK`, `ONE_SHOT`; whatever file is at
`/oidc/token` is sent as `Authorization: Bearer`, so it runs chrooted in a directory standing in for the pod's
filesystem). Go's senders cannot sign a body, so the triggers take a bearer token from a Secret; no sender here
gets in without it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.cloudevent_checks import received_event
from tests.integration.eventsinksupport import operator_with_sink
from tests.integration.ingress_support import (
    create_secret,
    hook_url,
    ingress,
    new_whsec,
    opt_in,
    runs,
    wait_until_cached,
)
from tests.integration.support import (
    TEST_SERVER_ADDRESS,
    apply,
    awaiting_approval,
    decide,
    start_run,
    wait_for,
    wait_for_phase,
    workflow,
)

from towline_dev.cloudevents_go import find_cesdk, find_heartbeats
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess
from towline_dev.install import OperatorProcess
from towline_dev.node.netns import in_namespace
from towline_dev.node.probehosts import NAMESPACE as TEST_HOSTS_NAMESPACE

pytestmark = pytest.mark.integration
__all__ = ["ingress"]

PAID = "com.example.order.paid"
SOURCE = "/shop/orders"
HEARTBEAT = "dev.knative.eventing.samples.heartbeat"
HEARTBEATS_SOURCE = "/knative/heartbeats"
TOKEN = "go-sdk-bearer-token-of-32-bytes!"


def _bearer_workflow(namespace: str, name: str, cloud_event: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": name, "namespace": namespace},
        "spec": {"triggers": [{"name": "events", "cloudEvent": {
            "verify": {"scheme": "bearer", "secretRef": {"name": f"{name}-token", "key": "token"}}, **cloud_event}}],
                 "steps": [{"id": "noop", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}]},
    }


def _bearer_trigger(cluster: ControlPlane, ingress: IngressProcess, namespace: str, name: str,
                    cloud_event: dict[str, Any]) -> str:
    """A Workflow whose cloudEvent trigger `events` takes a bearer token from a granted Secret; its URL."""
    create_secret(cluster, namespace, f"{name}-token", {"token": TOKEN})
    opt_in(cluster, namespace, f"{name}-token")
    apply(cluster, _bearer_workflow(namespace, name, cloud_event))
    wait_until_cached(ingress, namespace, name, "events")
    return hook_url(ingress, namespace, name, "events")


@pytest.fixture(scope="module")
def cesdk() -> Path:
    return find_cesdk()


@pytest.fixture
def shop(towline_installed: ControlPlane, ingress: IngressProcess, namespace: str) -> str:
    return _bearer_trigger(towline_installed, ingress, namespace, "orders", {
        "types": [PAID], "sources": [SOURCE],
        "data": {"order_id": "event.data.order.id", "subject": "event.subject"},
    })


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    return path


def go_send(cesdk: Path, url: str, mode: str, event_id: str, *, bearer: Path | None = None) -> int:
    """One event sent by the Go SDK's client in `mode`; the HTTP status the ingress answered."""
    command = [str(cesdk), "send", "-url", url, "-mode", mode, "-type", PAID, "-source", SOURCE, "-id", event_id,
               "-subject", "A-1001", "-data", json.dumps({"order": {"id": "A-1001"}})]
    if bearer is not None:
        command += ["-bearer-file", str(bearer)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    status: int = json.loads(result.stdout)["status"]
    return status


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_a_go_sdk_event_starts_exactly_one_run_with_the_mapped_data(
    towline_installed: ControlPlane, namespace: str, shop: str, cesdk: Path, token_file: Path, mode: str,
) -> None:
    assert go_send(cesdk, shop, mode, f"go-{mode}-1", bearer=token_file) == 202
    started = runs(towline_installed, namespace)
    assert len(started) == 1
    assert started[0]["spec"]["trigger"] == {"type": "webhook", "name": "events", "deliveryId": f"go-{mode}-1",
                                             "data": {"order_id": "A-1001", "subject": "A-1001"}}


def test_a_go_sdk_event_repeated_in_either_mode_starts_no_second_run(
    towline_installed: ControlPlane, namespace: str, shop: str, cesdk: Path, token_file: Path,
) -> None:
    assert go_send(cesdk, shop, "structured", "go-again", bearer=token_file) == 202
    for mode in ("structured", "binary"):
        assert go_send(cesdk, shop, mode, "go-again", bearer=token_file) == 200, mode
    assert len(runs(towline_installed, namespace)) == 1


def test_a_go_sdk_event_without_the_bearer_gets_401_and_no_run(
    towline_installed: ControlPlane, namespace: str, shop: str, cesdk: Path, tmp_path: Path,
) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text(TOKEN[::-1])
    for mode in ("structured", "binary"):
        assert go_send(cesdk, shop, mode, f"go-{mode}-anonymous") == 401, mode
        assert go_send(cesdk, shop, mode, f"go-{mode}-wrong", bearer=wrong) == 401, mode
    assert runs(towline_installed, namespace) == []


@pytest.fixture
def pulse(towline_installed: ControlPlane, ingress: IngressProcess, namespace: str) -> str:
    return _bearer_trigger(towline_installed, ingress, namespace, "pulse", {
        "types": [HEARTBEAT], "sources": [HEARTBEATS_SOURCE],
        "data": {"label": "event.data.label", "beat": "event.data.id", "heart": "event.heart"},
    })


def run_heartbeats(root: Path, sink: str, token: str | None) -> str:
    """Knative's heartbeats sending once to `sink` as a ContainerSource's pod would, with `token` in the pod's
    /oidc/token (None: no such file, as when Knative's OIDC is off); what it logged."""
    (root / "oidc").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(find_heartbeats(), root / "heartbeats")
    (root / "heartbeats").chmod(0o755)
    if token is not None:
        (root / "oidc" / "token").write_text(token)
    chroot = shutil.which("chroot")
    assert chroot is not None
    env = {"K_SINK": sink, "POD_NAME": "pulse-source", "POD_NAMESPACE": "events", "ONE_SHOT": "true"}
    result = subprocess.run([chroot, str(root), "/heartbeats", "-label", "hello", "-eventSource", HEARTBEATS_SOURCE],
                            env=env, capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_knative_heartbeats_without_a_token_is_refused_401_and_starts_no_run(
    towline_installed: ControlPlane, namespace: str, pulse: str, tmp_path: Path,
) -> None:
    logged = run_heartbeats(tmp_path / "pod", pulse, None)
    assert "client will not send Authorization header" in logged
    assert "failed to send cloudevent: 401" in logged, logged
    assert runs(towline_installed, namespace) == []


def test_knative_heartbeats_with_an_oidc_token_for_the_sink_is_refused_401_and_starts_no_run(
    towline_installed: ControlPlane, namespace: str, pulse: str, tmp_path: Path,
) -> None:
    """What Knative's `authentication-oidc` feature puts at /oidc/token: a ServiceAccount token the API server
    issued for the sink's audience (a TokenRequest, as Knative's token provider makes). No bearer Secret holds it."""
    issued = towline_installed.kubectl("create", "token", "default", "-n", namespace, "--audience", pulse,
                                       "--duration", "10m").stdout.strip()
    assert issued.count(".") == 2, "a JWT"
    logged = run_heartbeats(tmp_path / "pod", pulse, issued)
    assert "failed to send cloudevent: 401" in logged, logged
    assert runs(towline_installed, namespace) == []


def test_knative_heartbeats_with_the_trigger_token_at_its_token_path_starts_one_run(
    towline_installed: ControlPlane, namespace: str, pulse: str, tmp_path: Path,
) -> None:
    logged = run_heartbeats(tmp_path / "pod", pulse, TOKEN)
    assert "failed to send" not in logged, logged
    started = runs(towline_installed, namespace)
    assert len(started) == 1
    trigger = started[0]["spec"]["trigger"]
    assert trigger["data"] == {"label": "hello", "beat": 1, "heart": "yes"}
    assert trigger["deliveryId"], "the SDK gave the event an id"


@contextmanager
def go_receiver(cesdk: Path, out: Path) -> Iterator[str]:
    """The Go SDK receiving at a port of its own in the test hosts' network (where the sink guard lets the
    operator reach it); its URL. The socket is bound there and handed to the process."""
    def bind() -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((TEST_SERVER_ADDRESS, 0))
        listener.listen(64)
        return listener

    listener = in_namespace(TEST_HOSTS_NAMESPACE, bind)
    log = out.with_suffix(".log")
    with listener, log.open("wb") as stderr:
        process = subprocess.Popen([str(cesdk), "receive", "-listen-fd", str(listener.fileno()), "-out", str(out)],
                                   pass_fds=(listener.fileno(),), stdout=stderr, stderr=stderr)
        try:
            yield f"http://{TEST_SERVER_ADDRESS}:{listener.getsockname()[1]}/events"
        finally:
            process.terminate()
            process.wait(timeout=30)


def received(out: Path) -> list[dict[str, Any]]:
    """The receiver's records so far: its complete lines (it may be writing the next one)."""
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().split("\n")[:-1] if line.strip()]


def received_of(out: Path, run: str) -> list[dict[str, Any]]:
    """The receiver's records of the events about `run`."""
    return [record for record in received(out) if json.loads(record["body"])["data"]["run"] == run]


@pytest.mark.usefixtures("test_hosts")
def test_every_event_towline_sends_parses_with_the_go_sdk(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str, tmp_path: Path,
    cesdk: Path,
) -> None:
    cluster, ns, secret, out = towline_installed, team_namespace, new_whsec(), tmp_path / "received.jsonl"
    apply(cluster, workflow(ns, "announced", [
        {"id": "shape", "action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}},
        {"id": "review", "needs": ["shape"], "approval": {"approvers": {"users": ["bob"]}}},
    ]))
    with go_receiver(cesdk, out) as url, operator_with_sink(towline_operator, tmp_path, url, secret):
        run = start_run(cluster, ns, "announced")
        assert decide(cluster, ns, awaiting_approval(cluster, ns, run), "bob").returncode == 0
        assert wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
        # The operator announces every run it watches (other tests' too): this run's end is the one to wait for.
        wait_for("the run's last event at the Go receiver", lambda: any(
            (record["event"] or {}).get("type") == "dev.towline.run.succeeded" for record in received_of(out, run)))
    records = received_of(out, run)
    assert [record["error"] for record in records] == [""] * len(records), "the SDK accepted every event"
    types = []
    for record in records:
        parsed = record["event"]
        assert record["encoding"] == "structured"
        assert record["headers"]["webhook-signature"].startswith("v1,")
        # The signature checked over the body the Go SDK parsed; the Python SDK reads the same attributes.
        python = received_event(secret, record["headers"], record["body"].encode())
        assert parsed["id"] == record["headers"]["webhook-id"] == python["id"]
        assert parsed["source"] == python["source"] == f"/namespaces/{ns}/workflows/announced"
        assert parsed["subject"] == python["subject"]
        assert parsed["subject"].startswith((f"workflowruns/{run}", f"approvals/{run}")), parsed["subject"]
        assert parsed["type"] == python["type"] and parsed["data"] == python.get_data()
        types.append(parsed["type"])
    assert {"dev.towline.run.running", "dev.towline.step.succeeded", "dev.towline.approval.requested",
            "dev.towline.approval.decided", "dev.towline.run.succeeded"} <= set(types), types
    assert len({record["event"]["id"] for record in records}) == len(records)

"""A webhook-started run's trace, read back from a real collector (Jaeger, built here, towline_dev.collector).

The ingress and an operator with tracing on export over OTLP/HTTP to Jaeger in the test hosts' network; the run
has a step that fails once and is retried, an approval bob decides and a step that receives the attempt's
traceparent. The trace Jaeger holds is the span tree the run's status describes, with its times, and no byte of
it is the canary Secret's value or the delivery's canary payload.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.ingress_support import create_secret, hook_url, new_whsec, opt_in, post, signed_standard
from tests.integration.ingress_support import wait_until_cached as wait_until_ingress_sees
from tests.integration.replicas import in_place_of
from tests.integration.support import (
    ScriptedServer,
    apply,
    awaiting_approval,
    decide,
    get,
    step_status,
    wait_for,
    wait_for_phase,
)
from tests.keptlogs import kept_logs_root

from towline.engine.traces import attempt_span_id
from towline_connectors.wire import parse_rfc3339
from towline_dev.collector import OTLP_TRACES_URL, TraceCollector
from towline_dev.controlplane import ControlPlane
from towline_dev.ingress import IngressProcess, ingress_kubeconfig, install_ingress_rbac
from towline_dev.install import OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

CANARY_SECRET = "canary-secret-8c41e0d2b7"
CANARY_INPUT = "canary-input-51f9a3"
TRACING = {"TOWLINE_TRACING_ENDPOINT": OTLP_TRACES_URL}


@pytest.fixture(scope="module")
def collector(test_hosts: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TraceCollector]:
    started = TraceCollector(tmp_path_factory.mktemp("jaeger")).start()
    yield started
    started.stop()
    log = started.log_dir / "jaeger.log"
    (kept_logs_root() / "jaeger.log").write_bytes(log.read_bytes() if log.exists() else b"")


@pytest.fixture
def traced_operator(towline_operator: OperatorProcess, collector: TraceCollector, tmp_path: Path,
                    ) -> Iterator[OperatorProcess]:
    """The session operator restarted with traces exported to the collector, for this test only."""
    with in_place_of(towline_operator, tmp_path, settings=TRACING, kept_log="operator-traced.log") as traced:
        yield traced


@pytest.fixture
def traced_ingress(towline_installed: ControlPlane, collector: TraceCollector, tmp_path: Path,
                   ) -> Iterator[IngressProcess]:
    install_ingress_rbac(towline_installed)
    process = IngressProcess(kubeconfig=ingress_kubeconfig(towline_installed, tmp_path / "kubeconfig"),
                             log_path=tmp_path / "ingress.log", settings=TRACING).start()
    yield process
    process.stop()
    (kept_logs_root() / "ingress-traced.log").write_text(process.log_text())


def traced_workflow(namespace: str, api: str) -> dict[str, Any]:
    """check fails once (503) and is retried, review waits for bob, release posts with a canary credential."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "traced", "namespace": namespace},
        "spec": {
            "triggers": [{"name": "hook", "webhook": {
                "verify": {"scheme": "standard-webhooks", "secretRef": {"name": "traced-key",
                                                                          "key": "signing-secret"}},
                "data": {"note": "body.note"}}}],
            "steps": [
                {"id": "check", "action": "http.request", "with": {"url": f"{api}/status", "select": "response.body"},
                 "retry": {"limit": 2, "backoff": "fixed", "baseDelaySeconds": 1}},
                {"id": "review", "needs": ["check"], "approval": {"approvers": {"users": ["bob"]}}},
                {"id": "release", "needs": ["review"], "action": "http.request", "credentials": {"api": "canary"},
                 "with": {"url": f"{api}/release", "method": "POST",
                          "json": {"version": "${{ steps.check.output.version }}", "note": "${{ trigger.data.note }}"},
                          "auth": {"bearer": {"credential": "api", "key": "token"}}}},
            ],
        },
    }


def spans_by_name(trace: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for span in trace["spans"]:
        found.setdefault(span["operationName"], []).append(span)
    return found


def parent_of(span: dict[str, Any]) -> str | None:
    return next((ref["spanID"] for ref in span.get("references") or [] if ref["refType"] == "CHILD_OF"), None)


def tag(span: dict[str, Any], key: str) -> Any:
    return next((item["value"] for item in span["tags"] if item["key"] == key), None)


def micros(text: str) -> int:
    moment = parse_rfc3339(text)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def test_a_webhook_run_with_a_retry_and_an_approval_is_one_trace_in_the_collector(
    traced_operator: OperatorProcess, traced_ingress: IngressProcess, collector: TraceCollector,
    towline_installed: ControlPlane, team_namespace: str,
) -> None:
    cluster, ns = towline_installed, team_namespace
    secret = new_whsec()
    create_secret(cluster, ns, "traced-key", {"signing-secret": secret})
    opt_in(cluster, ns, "traced-key")
    create_secret(cluster, ns, "canary", {"token": CANARY_SECRET})
    with ScriptedServer() as api:
        api.script("/status", (503, {"error": "warming up"}, {}), (200, {"version": "1.4.2"}, {}))
        release = api.script("/release", (201, {"released": True}, {}))
        apply(cluster, traced_workflow(ns, api.url))
        wait_until_ingress_sees(traced_ingress, ns, "traced")
        body = json.dumps({"note": CANARY_INPUT}).encode()
        answer = post(hook_url(traced_ingress, ns, "traced"), body, signed_standard(secret, body))
        assert answer.status_code == 202, answer.text
        run = answer.json()["run"]
        created = get(cluster, "workflowruns.towline.dev", run, ns)
        assert created is not None
        traceparent = created["metadata"]["annotations"]["towline.dev/traceparent"]
        _, trace_id, delivery_span, _ = traceparent.split("-")
        approval = awaiting_approval(cluster, ns, run)
        assert decide(cluster, ns, approval, "bob").returncode == 0
        done = wait_for_phase(cluster, ns, run, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]

        def whole_trace() -> dict[str, Any] | None:
            trace = collector.trace(trace_id)
            return trace if trace is not None and len(trace["spans"]) == 6 else None

        trace = wait_for("the run's six spans in Jaeger", whole_trace, timeout=60,
                         explain=lambda: collector.trace(trace_id))
        spans = spans_by_name(trace)
        assert sorted((name, len(found)) for name, found in spans.items()) == [
            ("approval review", 1), ("delivery traced/hook", 1), ("run traced", 1), ("step check", 2),
            ("step release", 1)]

        # The tree: the ingress's delivery is the root, the run under it, every step and the approval under the run.
        (delivery,) = spans["delivery traced/hook"]
        (root,) = spans["run traced"]
        assert delivery["spanID"] == delivery_span and parent_of(delivery) is None
        assert trace["processes"][delivery["processID"]]["serviceName"] == "towline-ingress"
        assert parent_of(root) == delivery_span
        assert trace["processes"][root["processID"]]["serviceName"] == "towline-operator"
        children = [span for name, found in spans.items() if name.startswith(("step ", "approval ")) for span in found]
        assert {parent_of(span) for span in children} == {root["spanID"]}

        # The timings are the run's status.
        status = done["status"]
        assert (root["startTime"], root["startTime"] + root["duration"]) == (
            micros(status["startedAt"]), micros(status["finishedAt"]))
        check = step_status(done, "check")
        attempts = sorted(spans["step check"], key=lambda span: tag(span, "towline.step.attempt"))
        assert [(s["startTime"], s["startTime"] + s["duration"]) for s in attempts] == [
            (micros(record["startedAt"]), micros(record["finishedAt"])) for record in check["history"]]
        assert tag(attempts[0], "towline.step.error_class") == check["history"][0]["errorClass"]
        assert tag(attempts[0], "error") is True and tag(attempts[1], "towline.step.action") == "http.request"
        assert tag(attempts[1], "towline.step.image") == check["history"][1]["image"]
        review = step_status(done, "review")
        (gate,) = spans["approval review"]
        assert (gate["startTime"], gate["startTime"] + gate["duration"]) == (
            micros(review["startedAt"]), micros(review["finishedAt"]))

        # The release step sent its attempt's traceparent: a span the release server makes joins this trace.
        (released,) = spans["step release"]
        sent = release.requests[0]["headers"].get("traceparent")
        assert sent == f"00-{trace_id}-{released['spanID']}-01"
        assert int(released["spanID"], 16) == attempt_span_id(done["metadata"]["uid"], "release", 1)

        # No Secret value and no input value anywhere in what was exported.
        assert release.requests[0]["headers"]["Authorization"] == f"Bearer {CANARY_SECRET}"
        exported = collector.raw_trace(trace_id)
        assert CANARY_SECRET.encode() not in exported
        assert CANARY_INPUT.encode() not in exported

"""A namespace whose steps keep failing the egress isolation check gets one Event, not one per attempt.

Through the real API server, as the operator's own ServiceAccount: the actions the
engine emits for a storm of failed attempts are applied as the operator applies them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from towline.engine.actions import EmitEvent
from towline.engine.steps import EGRESS_ISOLATION_MISSING
from towline.k8s.actions import ActionContext, apply_actions
from towline.k8s.client import KubeApi
from towline.k8s.objects import RunRef, StepPodSettings
from towline.validation.catalog import connector_catalog
from towline_connectors.wire import EGRESS_NOT_ISOLATED_MESSAGE
from towline_dev.controlplane import ControlPlane
from towline_dev.install import operator_kubeconfig

pytestmark = pytest.mark.integration


async def _apply_storm(kubeconfig: Path, runs: list[RunRef], attempts: int) -> None:
    api = await KubeApi.connect(str(kubeconfig))
    context = ActionContext(api=api, pod_settings=StepPodSettings(), catalog=connector_catalog())
    try:
        for attempt in range(1, attempts + 1):
            for run in runs:
                message = f"step call attempt {attempt} failed (transient): {EGRESS_NOT_ISOLATED_MESSAGE}"
                await apply_actions(context, run, [EmitEvent("Warning", EGRESS_ISOLATION_MISSING, message)])
    finally:
        await api.close()


def _reports(cluster: ControlPlane, namespace: str) -> list[dict[str, object]]:
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    return [e for e in events if e.get("reason") == EGRESS_ISOLATION_MISSING]


def test_an_attempt_storm_makes_one_event_per_namespace(
    towline_installed: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = operator_kubeconfig(towline_installed, tmp_path / "operator.kubeconfig")
    runs = [RunRef(name=f"run-{i}", namespace=namespace, uid=f"00000000-0000-0000-0000-00000000001{i}",
                   workflow="wf") for i in range(3)]
    asyncio.run(_apply_storm(kubeconfig, runs, attempts=10))
    (event,) = _reports(towline_installed, namespace)
    assert event["type"] == "Warning"
    message = str(event["message"])
    assert f"in namespace {namespace}" in message and "egress.requireIsolation" in message

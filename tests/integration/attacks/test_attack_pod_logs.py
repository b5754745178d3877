"""Attacks on pod logs: the runner role starts runs; it does not read every pod's log in the namespace."""

from __future__ import annotations

import pytest
from tests.integration.attacks.attack_support import refused
from tests.integration.nodesupport import create, sleeper_pod, wait_running
from tests.integration.support import bind_role, wait_for

from towline_dev.controlplane import ControlPlane

pytestmark = [pytest.mark.integration]

LINE = "db-password=not-for-carol"


def test_a_runner_cannot_read_an_unrelated_pods_log(towline_installed: ControlPlane, team_namespace: str) -> None:
    """carol holds towline-runner (team_namespace binds it); another team's app pod logs a value she must not see."""
    cluster, ns = towline_installed, team_namespace
    pod = sleeper_pod("billing-app", ns)
    pod["spec"]["containers"][0]["command"] = ["/bin/busybox", "sh", "-c", f"echo {LINE}; exec sleep 3600"]
    create(cluster, pod)
    wait_running(cluster, ns, "billing-app")
    wait_for("the app's log line", lambda: LINE in cluster.kubectl("logs", "billing-app", "-n", ns).stdout)

    for verb in (("logs", "billing-app"), ("get", "pod", "billing-app"), ("get", "pods")):
        result = cluster.kubectl(*verb, "-n", ns, user="carol", check=False)
        refused(result, "Forbidden")
        assert LINE not in result.stdout

    # The opt-in role is what `kubectl towline logs` needs; with it the same request reads the log.
    bind_role(cluster, ns, "towline-log-reader", users=("carol",))
    wait_for("carol reads the log with towline-log-reader",
             lambda: LINE in cluster.kubectl("logs", "billing-app", "-n", ns, user="carol", check=False).stdout)

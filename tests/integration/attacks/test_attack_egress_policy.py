"""Attacks on step egress: the NetworkPolicy allows nothing the in-pod guard refuses, and default-deny stays.

NetworkPolicies are stored by the local control plane but not enforced, so
their content is checked through the API server. The guard's refusal of Azure
WireServer and local-use NAT64 is proved by the connector unit tests
(test_connector_ssrf.py): an integration run against an unfixed guard would
send packets to those non-loopback addresses. The attacker here is a team member with
rights over NetworkPolicies (alice, given a Role for it) who deletes or opens
up the namespace's default-deny policy.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest
from tests.integration.attacks.egress_support import allowed_by, one_step, start
from tests.integration.support import ScriptedServer, apply, get, step_policy, step_status

from towline_dev.controlplane import ControlPlane
from towline_dev.install import CHART, OperatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("test_hosts")]

DEFAULT_DENY = "towline-steps-default-deny"
GUARDED = ["10.0.0.1", "172.16.0.1", "192.168.0.1", "127.0.0.1", "169.254.169.254", "168.63.129.16",
           "100.64.0.1", "100.100.100.200", "0.0.0.1", "240.0.0.1", "::1", "fc00::1", "fe80::1",
           "64:ff9b:1::cb00:7101", "64:ff9b::a00:1", "64:ff9b::a9fe:a9fe"]



def test_a_step_policy_opens_nothing_the_in_pod_guard_refuses(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    with ScriptedServer() as api:
        api.script("/ok", (200, {"ok": True}, {}))
        apply(cluster, one_step(ns, "wide", {
            "action": "http.request", "with": {"url": f"{api.url}/ok"}, "allowPrivateNetworks": ["127.0.0.0/8"],
            "egress": [{"cidr": "0.0.0.0/0", "ports": [8443]}, {"cidr": "::/0"}]}))
        run = start(cluster, ns, "wide", "wide-run")
    assert run["status"]["phase"] == "Succeeded", run["status"]
    policy = step_policy(cluster, step_status(run, "call")["jobName"], ns)
    assert policy is not None
    loopback = ipaddress.ip_network("127.0.0.0/8")
    opened = [a for a in GUARDED if allowed_by(policy, a) and ipaddress.ip_address(a) not in loopback]
    assert opened == [], f"the NetworkPolicy opens {opened}, which the in-pod guard refuses"
    # The step's own opt-in stays open, but for the API server's address (127.0.0.1 here), which no step may reach.
    assert allowed_by(policy, "127.0.0.2"), "the step's own opt-in stays open"
    assert allowed_by(policy, "203.0.113.10") and allowed_by(policy, "2001:db8::1")


def test_a_deleted_or_opened_default_deny_policy_is_restored_before_the_next_step(
    towline_operator: OperatorProcess, towline_installed: ControlPlane, team_namespace: str
) -> None:
    cluster, ns = towline_installed, team_namespace
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "netpol-admin", "namespace": ns},
        "rules": [{"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                   "verbs": ["get", "list", "update", "patch", "delete"]}]})
    apply(cluster, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "netpol-admin-alice", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "netpol-admin"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]})
    apply(cluster, one_step(ns, "shape", {"action": "data.transform", "with": {"data": {}, "fields": {"ok": "true"}}}))
    assert start(cluster, ns, "shape", "first")["status"]["phase"] == "Succeeded"
    original = get(cluster, "networkpolicies", DEFAULT_DENY, ns)
    assert original is not None

    cluster.kubectl("delete", "networkpolicy", DEFAULT_DENY, "-n", ns, user="alice")
    assert start(cluster, ns, "shape", "after-delete")["status"]["phase"] == "Succeeded"
    restored = get(cluster, "networkpolicies", DEFAULT_DENY, ns)
    assert restored is not None and restored["spec"] == original["spec"]

    opened = {"spec": {"policyTypes": ["Ingress", "Egress"], "egress": [{}], "ingress": [{}]}}
    cluster.kubectl("patch", "networkpolicy", DEFAULT_DENY, "-n", ns, "--type", "merge", "-p", json.dumps(opened),
                    user="alice")
    assert (get(cluster, "networkpolicies", DEFAULT_DENY, ns) or {})["spec"].get("egress") == [{}]
    assert start(cluster, ns, "shape", "after-open")["status"]["phase"] == "Succeeded"
    restored = get(cluster, "networkpolicies", DEFAULT_DENY, ns)
    assert restored is not None and restored["spec"] == original["spec"]

    # The operator learns of changes from a watch: stripping the labels first must not hide the opening.
    stripped = {"metadata": {"labels": None}, **opened}
    cluster.kubectl("patch", "networkpolicy", DEFAULT_DENY, "-n", ns, "--type", "merge", "-p", json.dumps(stripped),
                    user="alice")
    assert (get(cluster, "networkpolicies", DEFAULT_DENY, ns) or {})["spec"].get("egress") == [{}]
    assert start(cluster, ns, "shape", "after-unlabelled-open")["status"]["phase"] == "Succeeded"
    restored = get(cluster, "networkpolicies", DEFAULT_DENY, ns)
    assert restored is not None and restored["spec"] == original["spec"]


def test_cluster_pod_and_service_cidrs_are_chart_values_that_reach_the_operator(
    towline_installed: ControlPlane,
) -> None:
    helm = towline_installed.binaries.path("helm")
    rendered = subprocess.run(
        [str(helm), "template", "towline", str(CHART), "--kube-version", "1.35.4", "--show-only",
         "templates/operator.yaml", "--set", "egress.podCIDRs={10.244.0.0/16}",
         "--set", "egress.serviceCIDRs={10.96.0.0/12}"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    assert '{name: TOWLINE_CLUSTER_CIDRS, value: "10.244.0.0/16,10.96.0.0/12"}' in rendered
    assert Path(CHART, "values.yaml").read_text().count("podCIDRs: []") == 1

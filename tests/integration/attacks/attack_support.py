"""What the attack tests share: a gated workflow, deciding as a person, and the Jobs a run has."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from tests.integration.support import apply, get, list_objects, step_status, wait_for, wait_for_phase
from tests.integration.writes import create_from_here

from towline_dev.controlplane import ControlPlane
from towline_dev.install import OPERATOR_NAMESPACE, operator_kubeconfig

INGRESS = f"system:serviceaccount:{OPERATOR_NAMESPACE}:towline-ingress"
"""The webhook ingress's identity: the chart's default `ingress.serviceAccount.name` in the release namespace."""
AS_INGRESS = (f"--as={INGRESS}", "--as-group=system:serviceaccounts")
"""kubectl arguments (for admin, who may impersonate) that act as the ingress."""

RUNS = "workflowruns.towline.dev"
APPROVALS = "approvals.towline.dev"


def gated_workflow(namespace: str, name: str = "gated", *, expires_after: str = "10m") -> dict[str, Any]:
    """A four-eyes gate only bob may decide, then `deploy`, whose output names the run's `who` param."""
    workflow = {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "params": [{"name": "who", "type": "string", "default": "nobody"}],
            "steps": [
                {"id": "review", "approval": {"message": "deploy?", "approvers": {"users": ["bob"]},
                                              "fourEyes": True, "expiresAfter": expires_after}},
                {"id": "deploy", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {"who": "${{ params.who }}"}, "fields": {"who": "data.who"}}},
            ],
        },
    }
    return workflow


def echo_workflow(namespace: str, name: str = "echo") -> dict[str, Any]:
    """One step, `deploy`, whose output names the run's `who` param."""
    return {
        "apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "params": [{"name": "who", "type": "string", "default": "nobody"}],
            "steps": [{"id": "deploy", "action": "data.transform",
                       "with": {"data": {"who": "${{ params.who }}"}, "fields": {"who": "data.who"}}}],
        },
    }


def install(cluster: ControlPlane, workflow: dict[str, Any]) -> None:
    apply(cluster, workflow)
    namespace, name = workflow["metadata"]["namespace"], workflow["metadata"]["name"]

    def ready() -> bool:
        found = get(cluster, "workflows.towline.dev", name, namespace) or {}
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in (found.get("status") or {}).get("conditions", []))

    wait_for(f"Workflow {name} to be Ready", ready)


def run_manifest(namespace: str, workflow: str, name: str, user: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"workflowRef": {"name": workflow}, "requestedBy": user, **spec}}


def create_as(cluster: ControlPlane, user: str, manifest: dict[str, Any], *extra: str) -> Any:
    """`kubectl create` as `user`, not raising: the caller asserts on the outcome. A plain create or server-side dry
    run is sent from the test process with the user's token (`writes.create_from_here`: the same request, answered
    in kubectl's words); with other arguments (impersonation), kubectl."""
    if set(extra) <= {"--dry-run=server"}:
        sent = create_from_here(cluster, manifest, user=user, dry_run=bool(extra))
        if sent is not None:
            return sent
    return cluster.kubectl("create", "-f", "-", *extra, stdin=json.dumps(manifest), user=user, check=False)


def patch_as(cluster: ControlPlane, user: str, kind: str, name: str, namespace: str, patch: dict[str, Any]) -> Any:
    return cluster.kubectl("patch", kind, name, "-n", namespace, "--type", "merge", "-p", json.dumps(patch),
                           user=user, check=False)


def decide(cluster: ControlPlane, namespace: str, approval: str, user: str, **extra: Any) -> Any:
    patch = {"spec": {"decision": "Approved", "decidedBy": user}, **extra}
    return patch_as(cluster, user, "approval", approval, namespace, patch)


def gate_approval(cluster: ControlPlane, namespace: str, run: str, step: str = "review") -> str:
    """The name of the Approval the run's gate waits on, once it exists."""
    found = wait_for_phase(cluster, namespace, run, {"AwaitingApproval"})
    name = step_status(found, step).get("approvalName")
    assert name, f"the gate of {run} records its Approval's name"
    wait_for(f"Approval {name}", lambda: get(cluster, APPROVALS, name, namespace))
    return str(name)


def jobs_of(cluster: ControlPlane, namespace: str, run: str, step: str | None = None) -> list[dict[str, Any]]:
    """Every Job labelled for the run (and step), whoever made it."""
    selector = f"towline.dev/run={run}" + (f",towline.dev/step={step.replace('_', '-')}" if step else "")
    return list_objects(cluster, "jobs", namespace, selector)


class AsOperator:
    """The operator's ServiceAccount and nothing else, as a compromised operator would act: `as_operator(ARGS...)`
    runs kubectl with a token of it, `as_operator.create(manifest)` sends the object with that token from the test
    process, as the operator's own client would (the attack is the API server's answer, not kubectl's: a kubectl
    process costs about 80 ms of CPU, and these tests send hundreds)."""

    def __init__(self, cluster: ControlPlane, kubeconfig: Path) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.token = str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])

    @classmethod
    def made(cls, cluster: ControlPlane, work: Path) -> AsOperator:
        """With a fresh token of the operator's ServiceAccount, its kubeconfig in `work`."""
        return cls(cluster, operator_kubeconfig(cluster, work / "operator.kubeconfig"))

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.cluster.binaries.path("kubectl")), "--kubeconfig", str(self.kubeconfig),
                               *args], input=stdin, capture_output=True, text=True, timeout=60, check=False)

    def create(self, manifest: dict[str, Any], *, dry_run: bool = False) -> subprocess.CompletedProcess[str]:
        """`manifest` created (`dry_run`: admitted, `kubectl create --dry-run=server`), with kubectl's exit status
        and words (the API server's message in stderr when refused)."""
        sent = create_from_here(self.cluster, manifest, token=self.token, dry_run=dry_run)
        if sent is not None:
            return sent
        return self("create", *(["--dry-run=server"] if dry_run else []), "-f", "-", stdin=json.dumps(manifest))


def refused(result: Any, *reasons: str) -> str:
    """Assert the API server refused the request, saying each of `reasons`; returns its message."""
    assert result.returncode != 0, f"the API server accepted it: {result.stdout}"
    for reason in reasons:
        assert reason in result.stderr, result.stderr
    return str(result.stderr)


def wait_until_policies_enforced(cluster: ControlPlane) -> None:
    """The API server enforces a new admission policy a moment after it reports it type-checked.

    Probe with a run every policy here refuses (nested too deep, a reserved name) until it is refused,
    so the first test of a session does not race the policies' installation.
    """
    deep: Any = 1
    for _ in range(40):
        deep = {"a": deep}
    probe = run_manifest("default", "probe", "probe-202601010000", "admin", params={"deep": deep})

    def refused() -> bool:
        # A server-side dry run, from this process (admission runs in full; nothing stays): once per attack test.
        answer = create_from_here(cluster, probe, dry_run=True)
        if answer is not None:
            return answer.returncode != 0
        if cluster.kubectl("create", "-f", "-", stdin=json.dumps(probe), check=False).returncode != 0:
            return True
        cluster.kubectl("delete", "workflowrun", "probe-202601010000", "-n", "default", "--wait=false")
        return False

    wait_for("the chart's admission policies to be enforced", refused, 60, interval=0.5)

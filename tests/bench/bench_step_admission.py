"""What the chart's admission policies cost the control plane for each step's objects.

`python -m tests.bench.bench_step_admission` (no root needed; kwok is the node). As the operator's
ServiceAccount, so RBAC and admission are those the operator meets, it makes STEPS step objects
the way a run's steps of one egress do (towline.k8s.actions.create_step_job: towline.k8s.objects.egress_rules,
towline.k8s.egresspolicies, towline.k8s.stepjobs, towline.k8s.steppods): their shared egress NetworkPolicy
once, then each step's Job, the Job's pod, the Job's end (a status write) and the removal of the operator's
finalizer from the pod; 16 steps at a time. Once with every binding of the chart, then (each time in a fresh
namespace) deleting `towline-step-objects` (the one policy with a rule for those requests), then every binding,
so each difference is one policy's cost. Prints kube-apiserver's CPU per step in each case and the time the
ValidatingAdmissionPolicy plugin took (`apiserver_admission_controller_admission_duration_seconds`; a latency,
which waiting for a core inflates: the CPU is the figure). Asserts nothing about time.

Kubernetes 1.35 converts the typed object (and the old one on an update) to unstructured form once
for each pass of a policy (match conditions, validations, message expressions, audit annotations),
whether or not its expressions there name the object: that conversion, not the CEL, is most of what a
policy costs per request (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

from tests.bench.figures import samples, table
from tests.bench.simcluster import SimCluster, cpu_seconds, sim_cluster
from towline.engine import naming
from towline.k8s.client import JOBS, NETWORK_POLICIES, WORKFLOW_RUNS, KubeApi
from towline.k8s.egresspolicies import build_shared_egress_policy
from towline.k8s.labels import LABEL_EGRESS
from towline.k8s.objects import RunRef, StepPodSettings, egress_rules
from towline.k8s.stepjobs import BuiltinAction, build_step_job
from towline.k8s.steppods import ended_status, release_step_pod, start_step_pod
from towline.validation.catalog import connector_catalog
from towline_dev.install import StepPods

STEPS = int(os.environ.get("BENCH_STEP_OBJECTS", "400"))
IN_FLIGHT = 16
ACTION = "data.transform"


async def _make_steps(cluster: SimCluster, namespace: str) -> None:
    """STEPS steps' objects, as the operator makes them, under a run that exists (its UID owns the Jobs)."""
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    api = await KubeApi.connect(str(cluster.operator_kubeconfig))
    settings = StepPodSettings(image=StepPods().runner_image)
    try:
        run, _ = await admin.create(WORKFLOW_RUNS.path(namespace), {
            "apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun", "metadata": {"name": "bench"},
            "spec": {"workflowRef": {"name": "bench"}, "requestedBy": "admin"}})
        ref = RunRef(name="bench", namespace=namespace, uid=run["metadata"]["uid"], workflow="bench")
        gate = asyncio.Semaphore(IN_FLIGHT)
        catalog = connector_catalog()
        rules = egress_rules(egress=[], connector_ports=catalog.connector_ports(ACTION, {}),
                             cluster_cidrs=settings.cluster_cidrs)
        policy = build_shared_egress_policy(ref, rules, ())
        await api.create(NETWORK_POLICIES.path(namespace), policy)

        async def step(index: int) -> None:
            step_id = f"s{index}"
            job_name = naming.job_name(ref.name, step_id, 1)
            async with gate:
                job, _ = await api.create(JOBS.path(namespace), build_step_job(
                    ref, BuiltinAction(catalog), job_name=job_name, step_id=step_id, attempt=1, action=ACTION,
                    inputs={}, credentials={}, idempotency_key=f"{ref.uid}-{step_id}", timeout_seconds=None,
                    settings=settings, created_at=datetime.now(UTC),
                    egress_group=policy["metadata"]["labels"][LABEL_EGRESS]))
                await start_step_pod(api, job, datetime.now(UTC))
                # The Job's end as the operator writes it once the pod ended (here: a failure, so no pod
                # status is needed), then the finalizer's removal.
                await api.merge_patch(JOBS.path(namespace, job_name, "status"), ended_status(
                    job, None, datetime.now(UTC), reason="BenchEnded", message="the benchmark ended it"))
                await release_step_pod(api, namespace, job_name)

        await asyncio.gather(*(step(i) for i in range(STEPS)))
    finally:
        await admin.close()
        await api.close()


def _measure(cluster: SimCluster, namespace: str) -> float:
    """kube-apiserver CPU seconds that making STEPS steps' objects took."""
    cluster.namespace(namespace)
    apiserver = cluster.plane.pids()["kube-apiserver"]
    before = cpu_seconds(apiserver)
    asyncio.run(_make_steps(cluster, namespace))
    return cpu_seconds(apiserver) - before


STAGES = (("every binding", ()), ("without towline-step-objects", ("towline-step-objects",)),
          ("no binding", ("--all",)))
"""Each stage deletes more of the chart's bindings, so each difference is one policy's cost."""
VAP_SECONDS = "apiserver_admission_controller_admission_duration_seconds_sum"


def _admission_seconds(metrics: str) -> float:
    """Seconds the ValidatingAdmissionPolicy plugin has taken so far, all requests."""
    return sum(value for labels, value in samples(metrics, VAP_SECONDS)
               if labels.get("name") == "ValidatingAdmissionPolicy")


def main() -> None:
    rows = []
    with sim_cluster() as cluster:
        _measure(cluster, "warm-up")  # the first requests of each kind pay for caches and compilation
        for index, (label, deleted) in enumerate(STAGES):
            if deleted:
                cluster.plane.kubectl("delete", "validatingadmissionpolicybindings", *deleted)
            before = _admission_seconds(cluster.apiserver_metrics())
            cpu = _measure(cluster, f"stage-{index}")
            plugin = _admission_seconds(cluster.apiserver_metrics()) - before
            rows.append([label, f"{cpu * 1000 / STEPS:.1f}", f"{plugin * 1000 / STEPS:.2f}"])
    print(f"{STEPS} steps' objects (Job, pod, the Job's end, finalizer removal; one shared egress policy), "
          f"{IN_FLIGHT} at a time, as the operator:")
    print(table(["chart's policies", "kube-apiserver CPU ms/step", "admission policy plugin ms/step"], rows))


if __name__ == "__main__":
    main()

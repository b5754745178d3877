"""Towline side by side with Argo Workflows: the same runs on the same cluster, kwok as the node.

`make bench-argo` (`python -m tests.bench.bench_argo`; no root; kwok and Argo's
workflow-controller of the pinned release are built once into the cache, the latter
in about 5 minutes on 2 cores). Not part of `make bench` (it builds a second
engine) nor of `make test`.

One cluster (tests/bench/simcluster.py). Scenarios, as bench_scale's shapes: 100 runs of a
5-step chain and 20 runs of a 50-step fan-out/fan-in, all created at once (16 creates
in flight). Towline runs them as WorkflowRuns (a Job per step); Argo as Workflows whose
DAG tasks are container templates (a pod per step), once as released (requeue 10 s, its
client limited to 20 QPS) and once tuned (DEFAULT_REQUEUE_TIME=1s, --workflow-workers=32, --qps=500
--burst=1000). Each engine runs
alone, watching only its scenario's namespace; its process's CPU (utime + stime from
/proc) is read around the batch, and the control plane's (kube-apiserver, etcd,
kube-controller-manager), its peak resident memory (VmHWM) after it. Then its namespace is
deleted, and waited for, while it still runs: every batch starts on a cluster holding nothing
of the batches before it (the fan-out of the engine that went second used to run beside
thousands of the others' objects).

Prints a Markdown table per scenario: steps/s; engine CPU ms per step; API requests
and writes per step from the API server (all clients: also the Job controller, the
scheduler, kwok and, for Argo, the stand-in for its wait container) and from the
engine's own client metric. Asserts nothing about time.

BENCH_ARGO_CONFIGS=tuned runs only tuned Argo, BENCH_ARGO_CONFIGS=none Towline alone;
BENCH_WITHOUT_ADMISSION_POLICIES=1 (or binding names, comma-separated) deletes the chart's admission policy
bindings first, to read what those checks cost the control plane by difference (a measurement only: no
cluster should run Towline so).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.bench.argoload import (
    DEFAULT,
    TUNED,
    ArgoController,
    ArgoObservations,
    ArgoSettings,
    argo_workflow,
    create_workflows,
    install_argo,
    report_outputs,
)
from tests.bench.figures import counts_by, delta, latency_row, split_reads_writes, table
from tests.bench.scaleload import Observations, Shape, chain, create_runs, fan_out_in, run_manifest, watching, workflow
from tests.bench.simcluster import (
    RUNNER,
    SimCluster,
    cpu_seconds,
    operator_metrics,
    operator_rss_kib,
    serving,
    sim_cluster,
)
from towline.k8s.client import KubeApi
from towline_dev.simnode import complete_owned_by

SCENARIOS = ((chain(5), int(os.environ.get("BENCH_CHAIN_RUNS", "100"))),
             (fan_out_in(48), int(os.environ.get("BENCH_FAN_RUNS", "20"))))
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT_SECONDS", "1800"))
ARGO_CONFIGS = {"default": DEFAULT, "tuned": TUNED}
"""Argo's settings to run, by name; BENCH_ARGO_CONFIGS=tuned skips Argo as released (its 20 QPS make it the longest
part) when only the tuned comparison is repeated."""
ARGO_OWN_METRIC = "argo_workflows_k8s_request_total"


@dataclass
class Figures:
    engine: str
    steps: int
    seconds: float
    cpu_seconds: float
    peak_rss_kib: int
    server: Counter[str]
    own: Counter[str] | None
    unfinished: int
    plane_cpu: dict[str, float]
    """CPU seconds of kube-apiserver, etcd and kube-controller-manager meanwhile, by process: what the engine's way
    of making a step costs the cluster (the admission policies' checks included)."""
    latencies: list[list[str]] = field(default_factory=list)
    """Rows of `latency_row` about the engine's steps (Towline's: where a step's time goes)."""
    by_client: Counter[str] = field(default_factory=Counter)
    """Requests the API server dispatched meanwhile, by flow schema: which kind of client made them (the
    engine's ServiceAccount is `service-accounts`; admin and the API server's own `exempt`; the controllers
    `kube-controller-manager` and `kube-system-service-accounts`)."""

    def row(self) -> list[str]:
        server_reads, server_writes = split_reads_writes(self.server)
        own = "n/a"
        if self.own is not None:
            reads, writes = split_reads_writes(self.own)
            own = f"{(reads + writes) / self.steps:.2f} / {writes / self.steps:.2f}"
        return [
            self.engine, f"{self.steps / self.seconds:.1f}", f"{self.cpu_seconds * 1000 / self.steps:.1f}",
            f"{sum(self.plane_cpu.values()) * 1000 / self.steps:.1f}",
            f"{(server_reads + server_writes) / self.steps:.2f}", f"{server_writes / self.steps:.2f}", own,
            f"{self.peak_rss_kib / 1024:.0f} MiB", f"{self.seconds:.1f} s",
        ]


def plane_cpu_seconds(cluster: SimCluster) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in cluster.plane.pids().items()}


def plane_cpu_since(cluster: SimCluster, before: dict[str, float]) -> dict[str, float]:
    return {name: seconds - before.get(name, 0.0) for name, seconds in plane_cpu_seconds(cluster).items()}


def _server_by_client(before: str, after: str) -> Counter[str]:
    metric = "apiserver_flowcontrol_dispatched_requests_total"
    grown = delta(counts_by(after, metric, "flow_schema"), counts_by(before, metric, "flow_schema"))
    return Counter({key[0]: count for key, count in grown.items()})


def _server_by_verb(before: str, after: str) -> Counter[str]:
    grown = delta(counts_by(after, "apiserver_request_total", "verb"),
                  counts_by(before, "apiserver_request_total", "verb"))
    return Counter({key[0]: count for key, count in grown.items()})


async def _wait(done: asyncio.Event, what: str, phases: dict[str, str]) -> None:
    try:
        await asyncio.wait_for(done.wait(), TIMEOUT)
    except TimeoutError:
        sys.exit(f"{what}: not every run finished in {TIMEOUT:.0f} s (phases {dict(Counter(phases.values()))})")


async def towline(cluster: SimCluster, shape: Shape, runs: int) -> Figures:
    namespace = f"towline-{shape.name}"
    cluster.namespace(namespace)
    # Every run kept, as Argo keeps every Workflow here (no TTL, no archive): the default history (10 of each)
    # had the cluster's garbage collector delete the older runs' Jobs, pods and policies inside the measured
    # window, on the API server both engines share.
    cluster.apply(workflow(shape, namespace, keep=runs))
    operator = cluster.start_operator(namespaces=(namespace,))
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    carol = await KubeApi.connect(str(cluster.plane.kubeconfig), context=RUNNER)
    seen = Observations(expected_runs=runs)
    assert operator.process is not None
    try:
        await serving(lambda: operator_metrics(operator), "the operator")
        await asyncio.sleep(5)  # the operator takes the Lease and settles on the Workflow before measuring
        async with watching(admin, namespace, seen):
            before, own_before = cluster.apiserver_metrics(), operator_metrics(operator)
            plane_before = plane_cpu_seconds(cluster)
            cpu_before, started = cpu_seconds(operator.process.pid), time.monotonic()
            await create_runs(carol, [run_manifest(shape, namespace, f"{shape.name}-{i}", RUNNER)
                                      for i in range(runs)], seen)
            await _wait(seen.done, "towline", seen.run_phase)
            seconds = max(seen.run_finished.values()) - started
            await asyncio.sleep(1)  # the history pass after the last run lands
            after, own_after = cluster.apiserver_metrics(), operator_metrics(operator)
            cpu = cpu_seconds(operator.process.pid) - cpu_before
            plane = plane_cpu_since(cluster, plane_before)
            peak = operator_rss_kib(operator)[1]
        cluster.drop_namespace(namespace)
    finally:
        for api in (admin, carol):
            await api.close()
        operator.stop()
    own = delta(counts_by(own_after, "towline_api_requests_total", "verb"),
                counts_by(own_before, "towline_api_requests_total", "verb"))
    unfinished = sum(phase != "Succeeded" for phase in seen.run_phase.values())
    to_pod, to_complete = seen.job_controller_latencies()
    latencies = [latency_row("Job created -> its pod created (operator)", to_pod),
                 latency_row("pod succeeded -> Job Complete (operator)", to_complete),
                 latency_row("needed steps over -> next Job created (operator)", seen.next_job_latencies(shape))]
    return Figures("Towline", shape.steps * runs, seconds, cpu, peak, _server_by_verb(before, after),
                   Counter({key[0]: count for key, count in own.items()}), unfinished, plane, latencies,
                   _server_by_client(before, after))


async def argo(cluster: SimCluster, shape: Shape, runs: int, config: str, settings: ArgoSettings) -> Figures:
    label = f"Argo ({config})"
    namespace = f"argo-{config}-{shape.name}"
    cluster.namespace(namespace)
    controller = ArgoController(cluster.plane, cluster.work, namespace, settings).start()
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    seen = ArgoObservations(expected=runs)
    try:
        await controller.ready(ARGO_OWN_METRIC)
        await asyncio.sleep(5)  # its informers sync before measuring, as the operator's settle
        async with report_outputs(admin, namespace, seen):
            before, own_before = cluster.apiserver_metrics(), _argo_metrics(controller)
            plane_before = plane_cpu_seconds(cluster)
            cpu_before, started = controller.cpu_seconds(), time.monotonic()
            await create_workflows(admin, [argo_workflow(shape, namespace, f"{shape.name}-{i}")
                                           for i in range(runs)], seen)
            await _wait(seen.done, label, seen.phase)
            seconds = max(seen.finished.values()) - started
            await asyncio.sleep(1)
            after, own_after = cluster.apiserver_metrics(), _argo_metrics(controller)
            cpu = controller.cpu_seconds() - cpu_before
            plane = plane_cpu_since(cluster, plane_before)
            peak = controller.rss_kib()[1]
        cluster.drop_namespace(namespace)
    finally:
        await admin.close()
        controller.stop()
    own = None
    if own_before is not None and own_after is not None:
        grown = delta(counts_by(own_after, ARGO_OWN_METRIC, "verb"), counts_by(own_before, ARGO_OWN_METRIC, "verb"))
        own = Counter({key[0]: count for key, count in grown.items()}) or None
    unfinished = sum(phase != "Succeeded" for phase in seen.phase.values())
    return Figures(label, shape.steps * runs, seconds, cpu, peak, _server_by_verb(before, after), own, unfinished,
                   plane, by_client=_server_by_client(before, after))


def _argo_metrics(controller: ArgoController) -> str | None:
    """The controller's own metrics, or None when they cannot be read (then only the server's count)."""
    try:
        return controller.metrics()
    except OSError as error:
        print(f"WARNING: no workflow-controller metrics ({error})", file=sys.stderr)
        return None


def report(shape: Shape, runs: int, figures: list[Figures]) -> None:
    print(f"\n### {runs} runs of {shape.name} ({shape.steps} steps each, {shape.steps * runs} steps)\n")
    print(table(["engine", "steps/s", "engine CPU ms/step", "control plane CPU ms/step",
                 "API requests/step (all clients)", "writes/step (all clients)",
                 "engine's own requests / writes per step", "engine peak RSS", "wall time"],
                [f.row() for f in figures]))
    for f in figures:
        if f.unfinished:
            print(f"\nWARNING: {f.engine}: {f.unfinished} runs did not succeed")
        print(f"\n{f.engine}: all clients by verb: "
              + ", ".join(f"{verb} {count / f.steps:.2f}" for verb, count in sorted(f.server.items())))
        print(f"{f.engine}: all clients by flow schema: "
              + ", ".join(f"{name} {count / f.steps:.2f}" for name, count in f.by_client.most_common()))
        print(f"{f.engine}: control plane CPU ms/step by process: "
              + ", ".join(f"{name} {seconds * 1000 / f.steps:.1f}" for name, seconds in sorted(f.plane_cpu.items())))
        if f.latencies:
            print(f"\n{f.engine}'s steps:\n")
            print(table(["latency", "n", "p50", "p95", "p99", "max"], f.latencies))


def chosen_configs(value: str) -> list[str]:
    if value.strip() == "none":  # Towline's side alone (its memory and CPU), no Argo built or installed
        return []
    chosen = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in ARGO_CONFIGS]
    if unknown or not chosen:
        raise SystemExit(f"BENCH_ARGO_CONFIGS: {', '.join(unknown) or 'nothing'} is not one of "
                         f"{', '.join(ARGO_CONFIGS)} (comma-separated)")
    return chosen


async def scenarios(cluster: SimCluster, configs: list[str]) -> None:
    if configs:
        install_argo(cluster.plane)
    without = os.environ.get("BENCH_WITHOUT_ADMISSION_POLICIES", "")
    if without:
        # What the chart's admission policies cost the control plane per step, by difference: never a setting
        # to run Towline with (each policy is a protection docs/security.md proves).
        names = ["--all"] if without == "1" else [name.strip() for name in without.split(",") if name.strip()]
        cluster.plane.kubectl("delete", "validatingadmissionpolicybindings", *names)
        print(f"\nWITHOUT the chart's admission policies {without} (bindings deleted): for their cost only")
    for shape, runs in SCENARIOS:
        figures = [await towline(cluster, shape, runs)]
        for config in configs:
            settings = ARGO_CONFIGS[config]
            figures.append(await argo(cluster, shape, runs, config, settings))
        report(shape, runs, figures)


def main() -> None:
    configs = chosen_configs(os.environ.get("BENCH_ARGO_CONFIGS", "default,tuned"))
    print(f"side by side: Towline and Argo Workflows on one control plane, kwok as the node; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    with sim_cluster(extra_stages=(complete_owned_by("argoproj.io/v1alpha1", "Workflow"),)) as cluster:
        asyncio.run(scenarios(cluster, configs))
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

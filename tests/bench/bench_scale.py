"""Throughput, latency and API cost per step at scale, against the real API server with kwok as the node.

`python -m tests.bench.bench_scale` (no root needed; kwok is built once into the
cache). Scenarios: 200 runs of a 5-step chain and 20 runs of a 50-step
fan-out/fan-in, all created at once (16 creates in flight). Each is run first by
the raw client (tests/bench/rawclient.py: create Job + patch run status per
step, the limit on this machine), then by the operator (one process, the chart's
RBAC, watching only the scenario's namespace), each in a namespace of its own.

Prints Markdown tables: throughput and the ratio to the raw client; p50/p95/p99
of run created -> first Job and step over (its pod succeeded or its Job Complete) -> next Job; API requests per step
by verb from the API server (all clients) and from the operator's own counter;
the operator process's CPU (utime + stime from /proc) per step over the batch.
With BENCH_TRACING=1 each operator batch runs once more with tracing on (every run's spans exported over
OTLP/HTTP to a loopback receiver, tests/bench/otlpsink.py) and the operator CPU per step of both is printed.
Asserts nothing about time.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass

from tests.bench.figures import counts_by, delta, latency_row, split_reads_writes, table
from tests.bench.otlpsink import OtlpSink
from tests.bench.rawclient import drive_run
from tests.bench.scaleload import Observations, Shape, chain, create_runs, fan_out_in, run_manifest, watching, workflow
from tests.bench.simcluster import RUNNER, SimCluster, operator_cpu_seconds, operator_metrics, serving, sim_cluster
from towline.k8s.client import WORKFLOW_RUNS, KubeApi
from towline.k8s.objects import StepPodSettings
from towline_dev.install import StepPods

SCENARIOS = ((chain(5), int(os.environ.get("BENCH_CHAIN_RUNS", "200"))),
             (fan_out_in(48), int(os.environ.get("BENCH_FAN_RUNS", "20"))))
PASSES = "towline_workqueue_work_duration_seconds_count"
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT_SECONDS", "1800"))
TRACING = os.environ.get("BENCH_TRACING") == "1"
"""Also run each batch with tracing on (spans to a loopback OTLP receiver, tests/bench/otlpsink.py)."""


@dataclass
class Outcome:
    shape: Shape
    runs: int
    seconds: float
    seen: Observations
    server: Counter[tuple[str, ...]]
    operator: Counter[tuple[str, ...]]
    operator_cpu: float = 0.0
    """CPU seconds (user + system) the operator process used from the first create to the last run's end."""
    passes: int = 0
    """Run passes the operator made meanwhile (its run queue's finished passes)."""

    @property
    def steps(self) -> int:
        return self.shape.steps * self.runs

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


async def _finish(seen: Observations, what: str) -> None:
    try:
        await asyncio.wait_for(seen.done.wait(), TIMEOUT)
    except TimeoutError:
        phases = Counter(seen.run_phase.values())
        sys.exit(f"{what}: only {len(seen.run_finished)} of {seen.expected_runs} runs finished in {TIMEOUT:.0f} s "
                 f"(phases {dict(phases)})")


async def raw_scenario(cluster: SimCluster, shape: Shape, runs: int) -> Outcome:
    namespace = f"raw-{shape.name}"
    cluster.namespace(namespace)
    cluster.apply(workflow(shape, namespace))
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    carol = await KubeApi.connect(str(cluster.plane.kubeconfig), context=RUNNER)
    operator_identity = await KubeApi.connect(str(cluster.operator_kubeconfig))
    seen = Observations(expected_runs=runs)
    settings = StepPodSettings(image=StepPods().runner_image)  # the chart's runner image: admission allows no other
    try:
        async with watching(admin, namespace, seen):
            before = cluster.apiserver_metrics()
            started = time.monotonic()
            gate = asyncio.Semaphore(16)

            async def one(index: int) -> None:
                async with gate:
                    manifest = run_manifest(shape, namespace, f"{shape.name}-{index}", RUNNER)
                    body, _ = await carol.create(WORKFLOW_RUNS.path(namespace), manifest)
                    seen.run_created[body["metadata"]["name"]] = time.monotonic()
                await drive_run(operator_identity, shape, body, seen, settings)

            await asyncio.gather(*(one(i) for i in range(runs)))
            await _finish(seen, "raw client")
            seconds = max(seen.run_finished.values()) - started
            after = cluster.apiserver_metrics()
    finally:
        for api in (admin, carol, operator_identity):
            await api.close()
    server = _server_delta(before, after)
    return Outcome(shape, runs, seconds, seen, server, Counter())


async def towline_scenario(cluster: SimCluster, shape: Shape, runs: int, *, traces_to: str | None = None) -> Outcome:
    """The operator's batch; with `traces_to` (an OTLP/HTTP traces URL) it exports every run's spans there."""
    namespace = f"towline-{shape.name}" + ("-traced" if traces_to else "")
    cluster.namespace(namespace)
    cluster.apply(workflow(shape, namespace))
    operator = cluster.start_operator(namespaces=(namespace,),
                                      settings={"TOWLINE_TRACING_ENDPOINT": traces_to} if traces_to else None)
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    carol = await KubeApi.connect(str(cluster.plane.kubeconfig), context=RUNNER)
    seen = Observations(expected_runs=runs)
    try:
        await serving(lambda: operator_metrics(operator), "the operator")
        await asyncio.sleep(5)  # the operator takes the Lease and settles on the Workflow before measuring
        async with watching(admin, namespace, seen):
            before, operator_before = cluster.apiserver_metrics(), operator_metrics(operator)
            cpu_before = operator_cpu_seconds(operator)
            started = time.monotonic()
            manifests = [run_manifest(shape, namespace, f"{shape.name}-{i}", RUNNER) for i in range(runs)]
            await create_runs(carol, manifests, seen)
            await _finish(seen, "towline")
            seconds = max(seen.run_finished.values()) - started
            await asyncio.sleep(1)  # the history pass after the last run lands
            cpu = operator_cpu_seconds(operator) - cpu_before
            after, operator_after = cluster.apiserver_metrics(), operator_metrics(operator)
    finally:
        for api in (admin, carol):
            await api.close()
        operator.stop()
    server = _server_delta(before, after)
    mine = delta(counts_by(operator_after, "towline_api_requests_total", "verb", "resource"),
                 counts_by(operator_before, "towline_api_requests_total", "verb", "resource"))
    passes = delta(counts_by(operator_after, PASSES, "name"), counts_by(operator_before, PASSES, "name"))
    failed = [name for name, phase in seen.run_phase.items() if phase != "Succeeded"]
    if failed:
        print(f"WARNING: {len(failed)} runs did not succeed, e.g. {failed[:3]}", file=sys.stderr)
    return Outcome(shape, runs, seconds, seen, server, mine, cpu, passes[("runs",)])


def report(raw: Outcome, towline: Outcome) -> None:
    shape = towline.shape
    print(f"\n### {towline.runs} runs of {shape.name} ({shape.steps} steps each, {towline.steps} steps)\n")
    print(table(["", "steps/s", "runs/min", "wall time"], [
        ["raw client (limit)", f"{raw.steps_per_second:.1f}", f"{raw.runs / raw.seconds * 60:.0f}",
         f"{raw.seconds:.1f} s"],
        ["towline", f"{towline.steps_per_second:.1f}", f"{towline.runs / towline.seconds * 60:.0f}",
         f"{towline.seconds:.1f} s"],
        ["ratio towline / raw", f"**{towline.steps_per_second / raw.steps_per_second:.2f}**", "", ""],
    ]))
    print(f"\noperator CPU: {towline.operator_cpu:.2f} s = **{towline.operator_cpu / towline.steps * 1000:.1f} ms per "
          f"step** (user + system, from the first create to 1 s after the last run finished); "
          f"{towline.passes} run passes = {towline.passes / towline.steps:.2f} per step")
    print()
    print(table(["latency", "n", "p50", "p95", "p99", "max"], [
        latency_row("towline: run created -> first Job", towline.seen.first_job_latencies()),
        latency_row("towline: step over -> next Job", towline.seen.next_job_latencies(shape)),
        latency_row("raw: run created -> first Job", raw.seen.first_job_latencies()),
        latency_row("raw: step over -> next Job", raw.seen.next_job_latencies(shape)),
    ]))
    print()
    operator_verbs: Counter[str] = Counter()
    leases = 0
    for (verb, resource), count in towline.operator.items():
        operator_verbs[verb] += count
        leases += count if resource == "leases" else 0
    rows = []
    for who, by_verb in (("towline operator", operator_verbs),
                         ("all clients (API server), towline", _flat(towline.server)),
                         ("all clients (API server), raw client", _flat(raw.server))):
        steps = towline.steps
        reads, writes = split_reads_writes(by_verb)
        verbs = ", ".join(f"{verb} {count / steps:.2f}" for verb, count in sorted(by_verb.items()))
        rows.append([who, f"{(reads + writes) / steps:.2f}", f"{writes / steps:.2f}", f"{reads / steps:.2f}", verbs])
    print(table(["requests per step", "all", "writes", "reads", "by verb"], rows))
    print(f"\noperator Lease requests: {leases} ({leases / towline.steps:.2f} per step); by resource:")
    by_resource: Counter[str] = Counter()
    for (verb, resource), count in towline.operator.items():
        by_resource[f"{verb} {resource}"] += count
    print(table(["operator request", "count", "per step"],
                [[key, str(count), f"{count / towline.steps:.2f}"] for key, count in by_resource.most_common()]))


def _server_delta(before: str, after: str) -> Counter[tuple[str, ...]]:
    metric = "apiserver_request_total"
    return delta(counts_by(after, metric, "verb"), counts_by(before, metric, "verb"))


def _flat(counter: Counter[tuple[str, ...]]) -> Counter[str]:
    return Counter({key[0]: count for key, count in counter.items()})


async def scenarios(cluster: SimCluster) -> None:
    for shape, runs in SCENARIOS:
        raw = await raw_scenario(cluster, shape, runs)
        towline = await towline_scenario(cluster, shape, runs)
        report(raw, towline)
        if TRACING:
            with OtlpSink() as sink:
                traced = await towline_scenario(cluster, shape, runs, traces_to=sink.url)
                await asyncio.sleep(3)  # the last batch (sent every 2 s) arrives
            report_tracing(towline, traced, sink.spans)


def report_tracing(untraced: Outcome, traced: Outcome, spans: int) -> None:
    """Operator CPU per step with every run's spans exported (to a loopback OTLP receiver) and without."""
    print(f"\n#### tracing: {traced.runs} runs of {traced.shape.name}, spans exported to a loopback OTLP receiver\n")
    print(table(["", "operator CPU per step", "steps/s", "spans received"], [
        ["tracing off", f"{untraced.operator_cpu / untraced.steps * 1000:.1f} ms",
         f"{untraced.steps_per_second:.1f}", "-"],
        ["tracing on", f"**{traced.operator_cpu / traced.steps * 1000:.1f} ms**", f"{traced.steps_per_second:.1f}",
         str(spans)],
    ]))


def main() -> None:
    print("scale bench: real API server, kube-scheduler, Job controller; kwok as the node")
    with sim_cluster() as cluster:
        asyncio.run(scenarios(cluster))


if __name__ == "__main__":
    main()

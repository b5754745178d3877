"""The archive beside the operator at the kwok benchmark's step rate: does it keep up, and what does it cost?

    python -m tests.bench.bench_archive_kwok

One cluster (tests/bench/simcluster.py) whose simulated node serves every step container's log through the API
server (`pods/log`, LOG_TEXT), so the archive reads a real log per step. The scenarios are bench_argo's, the fastest
the docs report: 100 runs of a 5-step chain and 20 runs of a 50-step fan-out/fan-in, all created at once (16 creates
in flight, as carol). Each scenario runs in a fresh namespace per batch: first the operator alone, as the kwok
benchmarks run it (the baseline), then the operator holding every run for the archive (TOWLINE_ARCHIVE=true) with
`towline archive` beside it as the chart's archive ServiceAccount (towline_dev.archiveprocess), once per backend of
BENCH_ARCHIVE_BACKENDS (default sqlite; postgresql starts Debian's server by towline_dev.postgres, fsync on).

A watch of the runs in this process times each run's end (its phase seen terminal) and its release (the archive's
finalizer seen gone, which the archive removes right after the run's record is written): the lag. "The end of the
load" is when the last run ended; the runs not yet released then are the backlog, and the drain is how long the last
of them took (and the runs/s it released meanwhile: its rate with a backlog). The rate it wrote the steps' logs at
comes from the log records' own times (first to last), against the operator's steps/s. The archive's CPU is its
process's (/proc), from the first create to the drain's end; its requests its own client's counter
(`towline_api_requests_total` on its metrics endpoint, as the operator's are counted), by verb, resource and answer,
with its mean wait per request (`towline_api_request_seconds`; a log GET is not timed there); the control plane's CPU
that of kube-apiserver, etcd and kube-controller-manager over the load; the database's bytes those of its tables and
indexes after the drain. Prints figures only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench.bench_archive import database_bytes
from tests.bench.bench_argo import plane_cpu_seconds, plane_cpu_since
from tests.bench.figures import counts_by, delta, latency_row, rss_kib, samples, split_reads_writes, table
from tests.bench.scaleload import (
    TERMINAL,
    Observations,
    Shape,
    chain,
    create_runs,
    fan_out_in,
    run_manifest,
    watch,
    watching,
    workflow,
)
from tests.bench.simcluster import RUNNER, SimCluster, cpu_seconds, operator_metrics, serving, sim_cluster
from towline.archive import open_store
from towline.archive.sqlstore import SqlArchiveStore
from towline.k8s.client import WORKFLOW_RUNS, KubeApi
from towline.k8s.labels import RUN_ARCHIVE_FINALIZER
from towline_dev.archiveprocess import ARCHIVE_SERVICE_ACCOUNT, ArchiveProcess, write_signing_key
from towline_dev.install import operator_kubeconfig
from towline_dev.processes import free_loopback_port

SCENARIOS = ((chain(5), int(os.environ.get("BENCH_CHAIN_RUNS", "100"))),
             (fan_out_in(48), int(os.environ.get("BENCH_FAN_RUNS", "20"))))
BACKENDS = tuple(name.strip() for name in os.environ.get("BENCH_ARCHIVE_BACKENDS", "sqlite").split(",") if name.strip())
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT_SECONDS", "1800"))
LOG_TEXT = "".join(f"step output line {n}: " + "x" * 40 + "\n" for n in range(16))
"""What every simulated container's log reads: 16 lines, about 1 KB, as bench_archive's logs."""
CHECKPOINT_SECONDS = 60
"""The chart's archive.checkpointSeconds."""


@dataclass
class Releases:
    """When the runs were seen ended and seen released by the archive (time.monotonic of the watch event)."""

    ended: dict[str, float] = field(default_factory=dict)
    released: dict[str, float] = field(default_factory=dict)
    expected: int = 0
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    clock: Callable[[], float] = time.monotonic

    def saw_run(self, run: dict[str, Any]) -> None:
        meta = run["metadata"]
        now = self.clock()
        if (run.get("status") or {}).get("phase") in TERMINAL:
            self.ended.setdefault(meta["name"], now)
            if RUN_ARCHIVE_FINALIZER not in (meta.get("finalizers") or ()):
                self.released.setdefault(meta["name"], now)
                if len(self.released) >= self.expected:
                    self.drained.set()

    def awaiting_at(self, moment: float) -> int:
        return sum(1 for name, ended in self.ended.items()
                   if ended <= moment and self.released.get(name, float("inf")) > moment)

    def released_after(self, moment: float) -> int:
        return sum(1 for released in self.released.values() if released > moment)

    def lags(self) -> list[float]:
        return [self.released[name] - ended for name, ended in self.ended.items() if name in self.released]


@dataclass
class Batch:
    label: str
    steps: int
    runs: int
    seconds: float
    operator_own: Counter[tuple[str, ...]]
    plane_cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds of kube-apiserver, etcd and kube-controller-manager over the load, by process."""
    archive: ArchiveFigures | None = None


@dataclass
class ArchiveFigures:
    archived_seconds: float
    """From the first create to the last run released."""
    awaiting_at_end: int
    drain_seconds: float
    released_in_drain: int
    """Runs released after the load's end: over `drain_seconds`, the archive's rate while it had a backlog."""
    lags: list[float]
    cpu_seconds: float
    peak_rss_kib: int
    own: Counter[tuple[str, ...]]
    """The archive's requests by (verb, resource, code)."""
    request_ms: dict[tuple[str, str], float]
    """The archive's mean wait for an answer, by (verb, resource), from its `towline_api_request_seconds`."""
    database_bytes: int
    records: Counter[str]
    logs_with_the_served_text: int
    log_span_seconds: float = 0.0
    """From the first step log written to the last (the records' own times)."""


def archive_metrics(archive: ArchiveProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{archive.metrics_port}/metrics", timeout=10) as response:
        text: str = response.read().decode()
    return text


@contextmanager
def database(backend: str, cluster: SimCluster, name: str) -> Iterator[str]:
    """A fresh database of `backend` for one batch: its URL."""
    if backend == "sqlite":
        yield f"sqlite:///{cluster.work / f'{name}.db'}"
        return
    if backend != "postgresql":
        raise SystemExit(f"BENCH_ARCHIVE_BACKENDS: {backend!r} is not sqlite or postgresql (comma-separated)")
    from towline_dev.postgres import running_postgres  # noqa: PLC0415 - only when PostgreSQL is asked for

    with running_postgres(lambda message: None, durable=True) as server:
        yield server.create_database(name.replace("-", "_"))


def store_figures(url: str) -> tuple[int, Counter[str], int, float]:
    """(database bytes, records by kind, log records that hold the text the node served, seconds from the first
    log record to the last by their `recorded_at`: the span over which the archive wrote the steps' logs)."""
    store = open_store(url, now=datetime.now(UTC))
    assert isinstance(store, SqlArchiveStore)
    try:
        used = database_bytes(store, url)
        kinds = Counter({str(kind): int(str(count)) for kind, count in
                         store.database.execute("SELECT kind, count(*) FROM entries GROUP BY kind")})
        served = 0
        for (body,) in store.database.execute("SELECT body FROM entries WHERE kind = 'log'"):
            document: dict[str, Any] = json.loads(body) if isinstance(body, str) else dict(body)  # type: ignore[call-overload]
            served += document.get("text") == LOG_TEXT
        ((first, last),) = store.database.execute("SELECT min(recorded_us), max(recorded_us) FROM entries "
                                                  "WHERE kind = 'log'")
        span = (int(str(last)) - int(str(first))) / 1e6 if first is not None and last is not None else 0.0
        return used, kinds, served, span
    finally:
        store.close()


def empty_bytes(url: str) -> int:
    """The migrated, empty database's bytes (the archive then finds its schema in place)."""
    store = open_store(url, now=datetime.now(UTC))
    assert isinstance(store, SqlArchiveStore)
    try:
        return database_bytes(store, url)
    finally:
        store.close()


async def batch(cluster: SimCluster, shape: Shape, runs: int, backend: str | None) -> Batch:
    label = f"archive ({backend})" if backend else "operator alone"
    namespace = f"{shape.name}-{backend or 'alone'}"
    print(f"{runs} x {shape.name}, {label}: load average {os.getloadavg()[0]:.1f} at its start", flush=True)
    cluster.namespace(namespace)
    cluster.apply(workflow(shape, namespace, keep=runs))  # every run kept, as bench_argo keeps them
    with ExitStack() as stack:
        archive = None
        url = ""
        if backend:
            url = stack.enter_context(database(backend, cluster, namespace))
            empty = empty_bytes(url)
            kubeconfig = operator_kubeconfig(cluster.plane, cluster.work / f"{namespace}-archive.kubeconfig",
                                             service_account=ARCHIVE_SERVICE_ACCOUNT)
            archive = ArchiveProcess(
                kubeconfig=kubeconfig, log_path=cluster.work / f"{namespace}-archive.log", database_url=url,
                signing_key_file=write_signing_key(cluster.work / f"{namespace}-signing-key.pem"),
                watch_namespaces=(namespace,), checkpoint_seconds=CHECKPOINT_SECONDS,
                metrics_port=free_loopback_port()).start()
            stack.callback(archive.stop)
        operator = cluster.start_operator(namespaces=(namespace,),
                                          settings={"TOWLINE_ARCHIVE": "true" if backend else "false"})
        stack.callback(operator.stop)
        result = await _measure(cluster, shape, runs, namespace, label, operator, archive)
        if archive is not None and result.archive is not None:
            (result.archive.database_bytes, result.archive.records, result.archive.logs_with_the_served_text,
             result.archive.log_span_seconds) = store_figures(url)
            result.archive.database_bytes -= empty
        cluster.drop_namespace(namespace)  # while both still run: the runs' finalizers are theirs to remove
    return result


async def _measure(cluster: SimCluster, shape: Shape, runs: int, namespace: str, label: str, operator: Any,
                   archive: ArchiveProcess | None) -> Batch:
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    carol = await KubeApi.connect(str(cluster.plane.kubeconfig), context=RUNNER)
    seen, releases, stop = Observations(expected_runs=runs), Releases(expected=runs), asyncio.Event()
    releases_watch = asyncio.create_task(watch(admin, WORKFLOW_RUNS.path(namespace), releases.saw_run, stop))
    try:
        await serving(lambda: operator_metrics(operator), "the operator")
        if archive is not None:
            await serving(lambda: archive_metrics(archive), "the archive")
        await asyncio.sleep(5)  # the operator takes the Lease, the archive lists, before measuring
        async with watching(admin, namespace, seen):
            own_before = operator_metrics(operator)
            archive_before = archive_metrics(archive) if archive is not None else ""
            archive_cpu = cpu_seconds(archive.process.pid) if archive is not None and archive.process else 0.0
            plane_before, started = plane_cpu_seconds(cluster), time.monotonic()
            await create_runs(carol, [run_manifest(shape, namespace, f"{shape.name}-{i}", RUNNER)
                                      for i in range(runs)], seen)
            await _wait(seen.done, f"{label}: every run to end", seen.run_phase)
            load_end = max(seen.run_finished.values())
            figures = Batch(label, shape.steps * runs, runs, load_end - started, Counter(),
                            plane_cpu_since(cluster, plane_before))
            if archive is not None and archive.process is not None:
                await _wait(releases.drained, f"{label}: every run to be archived", seen.run_phase)
                last = max(releases.released.values())
                after = archive_metrics(archive)
                figures.archive = ArchiveFigures(
                    archived_seconds=last - started, awaiting_at_end=releases.awaiting_at(load_end),
                    drain_seconds=max(0.0, last - load_end), released_in_drain=releases.released_after(load_end),
                    lags=releases.lags(),
                    cpu_seconds=cpu_seconds(archive.process.pid) - archive_cpu,
                    peak_rss_kib=_peak_rss_kib(archive.process.pid),
                    own=delta(counts_by(after, "towline_api_requests_total", "verb", "resource", "code"),
                              counts_by(archive_before, "towline_api_requests_total", "verb", "resource", "code")),
                    request_ms=mean_request_ms(archive_before, after),
                    database_bytes=0, records=Counter(), logs_with_the_served_text=0)
            else:
                await asyncio.sleep(1)  # the history pass after the last run lands, as bench_argo
            figures.operator_own = delta(counts_by(operator_metrics(operator), "towline_api_requests_total", "verb"),
                                         counts_by(own_before, "towline_api_requests_total", "verb"))
        return figures
    finally:
        stop.set()
        releases_watch.cancel()
        await asyncio.gather(releases_watch, return_exceptions=True)
        for api in (admin, carol):
            await api.close()


def mean_request_ms(before: str, after: str) -> dict[tuple[str, str], float]:
    """Mean seconds per request between two scrapes of `towline_api_request_seconds`, in ms, by (verb, resource)."""
    def totals(text: str, suffix: str) -> dict[tuple[str, str], float]:
        found: dict[tuple[str, str], float] = {}
        for labels, value in samples(text, f"towline_api_request_seconds_{suffix}"):
            key = (labels.get("verb", ""), labels.get("resource", ""))
            found[key] = found.get(key, 0.0) + value
        return found

    sums, counts = totals(after, "sum"), totals(after, "count")
    sums_before, counts_before = totals(before, "sum"), totals(before, "count")
    means = {}
    for key, count in counts.items():
        grown = count - counts_before.get(key, 0.0)
        if grown > 0:
            means[key] = (sums[key] - sums_before.get(key, 0.0)) / grown * 1000
    return means


def _peak_rss_kib(pid: int) -> int:
    return rss_kib(Path(f"/proc/{pid}/status").read_text())[1]


async def _wait(done: asyncio.Event, what: str, phases: dict[str, str]) -> None:
    try:
        await asyncio.wait_for(done.wait(), TIMEOUT)
    except TimeoutError:
        sys.exit(f"{what}: not in {TIMEOUT:.0f} s (phases {dict(Counter(phases.values()))})")


def report(shape: Shape, runs: int, batches: list[Batch]) -> None:
    steps = shape.steps * runs
    print(f"\n### {runs} runs of {shape.name} ({steps} steps)\n")
    rows = []
    for b in batches:
        reads, writes = split_reads_writes(Counter({k[0]: v for k, v in b.operator_own.items()}))
        row = [b.label, f"{b.steps / b.seconds:.1f}", f"{(reads + writes) / b.steps:.2f} / {writes / b.steps:.2f}",
               f"{sum(b.plane_cpu.values()) * 1000 / b.steps:.1f}"]
        a = b.archive
        if a is None:
            row += ["-"] * 8
        else:
            lags = latency_row("", a.lags)
            drain = f"{a.drain_seconds:.1f} s, {_rate(a.released_in_drain, a.drain_seconds)} runs/s"
            logs = a.records.get("log", 0)
            row += [f"{b.runs / a.archived_seconds:.2f} ({_rate(logs, a.log_span_seconds)})",
                    f"{lags[2]} / {lags[3]} / {lags[5]}",
                    f"{a.awaiting_at_end} ({drain})", f"{a.cpu_seconds * 1000 / b.steps:.1f}",
                    f"{a.peak_rss_kib / 1024:.0f} MiB", f"{sum(a.own.values()) / b.steps:.2f}",
                    f"{a.database_bytes / b.runs:,.0f} / {a.database_bytes / b.steps:,.0f}",
                    f"{a.logs_with_the_served_text} of {a.records.get('log', 0)}"]
        rows.append(row)
    print(table(["batch", "steps/s", "operator requests / writes per step", "control plane CPU ms/step",
                 "runs archived/s, first create -> last release (steps' logs written/s)",
                 "lag run end -> record p50 / p95 / max", "runs awaiting at the load's end (drained in, at)",
                 "archive CPU ms/step", "archive peak RSS", "archive requests/step", "DB bytes per run / step",
                 "log records with the served log"], rows))
    for b in batches:
        print(f"\n{b.label}: control plane CPU ms/step by process: "
              + ", ".join(f"{name} {seconds * 1000 / b.steps:.1f}" for name, seconds in sorted(b.plane_cpu.items())))
        if b.archive is None:
            continue
        print(f"{b.label}: its requests per step by verb, resource and answer: " + ", ".join(
            f"{verb} {resource} {code} {count / b.steps:.3f}"
            for (verb, resource, code), count in sorted(b.archive.own.items(), key=lambda item: -item[1])))
        print(f"{b.label}: its mean wait per request: " + ", ".join(
            f"{verb} {resource} {ms:.1f} ms" for (verb, resource), ms in sorted(b.archive.request_ms.items())
            if verb != "WATCH"))
        records = sorted(b.archive.records.items())
        print(f"{b.label}: records " + ", ".join(f"{kind} {count}" for kind, count in records))


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:.1f}" if seconds > 0 else "-"


async def scenarios(cluster: SimCluster) -> None:
    for shape, runs in SCENARIOS:
        if runs <= 0:
            continue
        batches = [await batch(cluster, shape, runs, None)]
        for backend in BACKENDS:
            batches.append(await batch(cluster, shape, runs, backend))
        report(shape, runs, batches)


def main() -> None:
    print(f"the archive beside the operator, kwok as the node (its containers' logs served); {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the start; backends {', '.join(BACKENDS)}")
    with sim_cluster(log_text=LOG_TEXT) as cluster:
        asyncio.run(scenarios(cluster))
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

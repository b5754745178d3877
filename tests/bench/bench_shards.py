"""Several active operator replicas, namespaces hashed into shards, holders killed and paused mid-run.

`python -m tests.bench.bench_shards` (no root, no real node: the loopback control
plane with kwok as the node, tests/bench/simcluster.py). 3 replicas, 3 shards
(TOWLINE_SHARDS), a 6 s Lease renewed within 4 s; 300 runs of a 3-step chain
across 30 namespaces, created at once. Once a quarter of them finished, the
holder of one shard is SIGKILLed; once half finished, the holder of another is
SIGSTOPped until a replica took its shard over, then resumed.

Prints: which replica held which shard, how long each take-over took (from the
Lease's own acquireTime), runs decided per shard and per replica (from each
replica's log line for every run it decided, which a killed replica leaves
behind, unlike its metrics; a run a killed or paused holder decided just before
its signal, without the log line, counts as that holder's), and exits non-zero when a run did not succeed, a
run was decided by no replica or by two, or a step got a second Job.
Sizes: BENCH_SHARD_RUNS, BENCH_SHARD_NAMESPACES, BENCH_SHARD_REPLICAS, BENCH_SHARDS (1: the single Lease
`towline-operator` of old, one replica acting for all).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.bench.figures import counts_by, table
from tests.bench.scaleload import TERMINAL, chain, create_runs, run_manifest, watch, workflow
from tests.bench.scaleload import Observations as RunObservations
from tests.bench.simcluster import RUNNER, SimCluster, operator_metrics, sim_cluster
from towline.k8s.client import JOBS, LEASES, WORKFLOW_RUNS, KubeApi
from towline.k8s.labels import ANNOTATION_STEP_ID, LABEL_RUN
from towline.k8s.shards import shard_lease_name, shard_of
from towline_connectors.wire import parse_rfc3339
from towline_dev.install import OPERATOR_NAMESPACE, OperatorProcess
from towline_dev.processes import free_loopback_port

SHORT_LEASE = {"TOWLINE_LEASE_DURATION_SECONDS": "6", "TOWLINE_LEASE_RENEW_DEADLINE_SECONDS": "4",
               "TOWLINE_LEASE_RETRY_PERIOD_SECONDS": "1"}
SHAPE = chain(3)
DECIDED = re.compile(r"^(?P<namespace>\S+)/(?P<run>\S+): decided (?P<phase>\w+) \(shard (?P<shard>\d+) of \d+, "
                     r"(?P<identity>\S+)\)$")
HOLDING = re.compile(r"^(?P<no>no longer )?holding shard (?P<shard>\d+) of \d+$")
CANCELLED = "lost the Lease during a pass; cancelling it"
"""A replica's passes cancelled as its Lease went (its renewal late on a loaded machine): a status write under
way may have landed, its log line not."""
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT_SECONDS", "900"))


@dataclass
class ShardProof:
    """What one proof saw; `problems` is empty when every run was decided once and no step started twice."""

    runs: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, run) -> phase, from the watch."""
    finished_at: dict[tuple[str, str], datetime] = field(default_factory=dict)
    """(namespace, run) -> its status.finishedAt (the deciding replica's clock)."""
    shards: int = 3
    disrupted: list[tuple[frozenset[int], str, datetime]] = field(default_factory=list)
    """(the shards it held, replica, when) of each SIGKILL and SIGSTOP."""
    cancelled: list[tuple[frozenset[int], str, datetime]] = field(default_factory=list)
    """(the shards it held, replica, when) of each time a replica cancelled its passes on losing a Lease."""
    jobs: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)
    """(namespace, run, step) -> the names of its Jobs."""
    decided: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=dict)
    """(namespace, run) -> (shard, replica) of each log line that says it was decided."""
    holders: list[tuple[str, dict[int, str]]] = field(default_factory=list)
    """When, and each shard's holder then."""
    takeovers: list[tuple[str, int, str, str, float]] = field(default_factory=list)
    """(what was done, shard, old holder, new holder, seconds from the signal to the new holder's acquireTime)."""
    seconds: float = 0.0
    metrics: dict[str, Counter[tuple[str, ...]]] = field(default_factory=dict)
    """replica -> towline_shard_runs_decided_total by shard, scraped from each replica alive at the end."""

    def problems(self) -> list[str]:
        found = [f"{len(self.not_succeeded)} runs did not succeed, e.g. {self.not_succeeded[:3]}"
                 ] if self.not_succeeded else []
        never = self.undecided()
        twice = [key for key, who in self.decided.items() if len(who) > 1]
        doubled = [key for key, names in self.jobs.items() if len(names) > 1]
        if never:
            found.append(f"{len(never)} runs were decided by no replica, e.g. {never[:3]}")
        if twice:
            found.append(f"{len(twice)} runs were decided twice, e.g. {[(k, self.decided[k]) for k in twice[:3]]}")
        if doubled:
            found.append(f"{len(doubled)} steps got a second Job, e.g. {[(k, self.jobs[k]) for k in doubled[:3]]}")
        for replica, counted in self.metrics.items():
            logged = Counter((str(shard),) for who in self.decided.values() for shard, name in who if name == replica)
            if +counted != logged:
                found.append(f"{replica}: towline_shard_runs_decided_total {dict(counted)} but its log says "
                             f"{dict(logged)}")
        return found

    def undecided(self) -> list[tuple[str, str]]:
        """Runs with neither a log line saying who decided them nor a killed or paused holder that did."""
        return [key for key in self.runs if key not in self.decided and self.unlogged_decider(key) is None]

    def unlogged_decider(self, key: tuple[str, str]) -> str | None:
        """The replica that decided `key` without logging it: the holder of its shard, SIGKILLed or SIGSTOPped, or
        cancelling its passes on losing the shard's Lease, after the run's finishedAt (the start of the pass that
        decided it), else None. Its write landed while it held the shard; killed, the answer was lost with the
        process; paused, or its Lease's renewal late, the pass was cancelled ("lost the Lease during a pass")
        before its log line. Nobody else could write that run's status before the Lease expired."""
        finished = self.finished_at.get(key)
        for shards, replica, when in [*self.disrupted, *self.cancelled]:
            if finished is not None and shard_of(key[0], self.shards) in shards and finished <= when:
                return replica
        return None

    def deciders(self) -> dict[tuple[str, str], list[tuple[int, str]]]:
        """Who decided each run: its log lines, or the killed or paused holder that decided it unlogged."""
        found = dict(self.decided)
        for key in self.runs:
            replica = self.unlogged_decider(key) if key not in found else None
            if replica is not None:
                found[key] = [(shard_of(key[0], self.shards), f"{replica} (unlogged, killed or paused)")]
        return found

    @property
    def not_succeeded(self) -> list[tuple[str, str]]:
        return [key for key, phase in self.runs.items() if phase != "Succeeded"]

    def per_shard(self) -> Counter[int]:
        return Counter(who[0][0] for who in self.deciders().values())

    def per_replica(self) -> Counter[str]:
        return Counter(who[0][1] for who in self.deciders().values())

    def split(self) -> float:
        """The largest shard's runs over the mean, minus 1 (0.2: the busiest shard has 20 % more than its share)."""
        counts = self.per_shard()
        return max(counts.values()) / (sum(counts.values()) / len(counts)) - 1 if counts else 0.0


def start_replicas(cluster: SimCluster, replicas: int, shards: int) -> list[OperatorProcess]:
    settings = {**SHORT_LEASE, "TOWLINE_SHARDS": str(shards), "TOWLINE_REPLICAS": str(replicas)}
    started = []
    for index in range(replicas):
        operator = OperatorProcess(kubeconfig=cluster.operator_kubeconfig,
                                   log_path=cluster.work / f"shard-replica-{index}.log",
                                   identity=f"towline-operator-{index}", metrics_port=free_loopback_port(),
                                   settings=settings)
        cluster.operators.append(operator.start())
        started.append(operator)
    return started


async def lease_holders(api: KubeApi, shards: int) -> dict[int, tuple[str, datetime | None]]:
    """shard -> (holder, acquireTime), for Leases held and current now."""
    found = {}
    for index in range(shards):
        name = shard_lease_name("towline-operator", index, shards)
        lease = await api.get(f"{LEASES.path(OPERATOR_NAMESPACE)}/{name}")
        spec = (lease or {}).get("spec") or {}
        renewed = str(spec.get("renewTime") or "")
        current = bool(renewed) and (datetime.now(UTC) - parse_rfc3339(renewed)).total_seconds() <= float(
            spec.get("leaseDurationSeconds") or 0)
        if spec.get("holderIdentity") and current:
            acquired = spec.get("acquireTime")
            found[index] = (str(spec["holderIdentity"]), parse_rfc3339(acquired) if acquired else None)
    return found


async def wait_until(what: str, check: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def shard_proof(cluster: SimCluster, *, runs: int, namespaces: int, replicas: int, shards: int = 3,
                      pause: bool = True) -> ShardProof:
    """Run the proof on `cluster`; the caller judges `ShardProof.problems()`."""
    names = [f"bench-{i}" for i in range(namespaces)]
    for namespace in names:
        cluster.namespace(namespace)
        cluster.apply(workflow(SHAPE, namespace))
    operators = {operator.identity: operator for operator in start_replicas(cluster, replicas, shards)}
    admin = await KubeApi.connect(str(cluster.plane.kubeconfig))
    carol = await KubeApi.connect(str(cluster.plane.kubeconfig), context=RUNNER)
    proof = ShardProof(shards=shards)
    seen = RunObservations(expected_runs=runs)
    finished = asyncio.Event()

    def saw_run(body: dict[str, Any]) -> None:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        proof.runs[key] = (body.get("status") or {}).get("phase") or "Pending"
        if (body.get("status") or {}).get("finishedAt"):
            proof.finished_at[key] = parse_rfc3339(body["status"]["finishedAt"])
        seen.saw_run(body)
        if len([p for p in proof.runs.values() if p in TERMINAL]) >= runs:
            finished.set()

    def saw_job(body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], (meta.get("labels") or {}).get(LABEL_RUN, ""),
               (meta.get("annotations") or {}).get(ANNOTATION_STEP_ID, ""))
        proof.jobs.setdefault(key, set()).add(meta["name"])

    stop = asyncio.Event()
    watches = [asyncio.create_task(watch(admin, WORKFLOW_RUNS.path(), saw_run, stop)),
               asyncio.create_task(watch(admin, JOBS.path(), saw_job, stop))]
    try:
        holders = await wait_until("spread of the shards", lambda: _spread(admin, shards, set(operators)))
        proof.holders.append(("start", {i: holder for i, (holder, _) in holders.items()}))
        manifests = [run_manifest(SHAPE, names[i % namespaces], f"run-{i}", RUNNER) for i in range(runs)]
        started = time.monotonic()
        await create_runs(carol, manifests, seen)
        await _wait_finished(proof, runs // 4)
        await _disrupt(admin, operators, proof, shards, "SIGKILL", avoid=set())
        if pause:
            await _wait_finished(proof, runs // 2)
            await _disrupt(admin, operators, proof, shards, "SIGSTOP",
                           avoid={proof.takeovers[-1][1]} if shards > 1 else set())
        await asyncio.wait_for(finished.wait(), TIMEOUT)
        proof.seconds = time.monotonic() - started
        await _until_logged(operators, proof)
        alive = {name for name, operator in operators.items() if operator.process and operator.process.poll() is None}
        holders = await wait_until("spread over the replicas alive", lambda: _spread(admin, shards, alive))
        for name in sorted(alive):
            proof.metrics[name] = counts_by(operator_metrics(operators[name]), "towline_shard_runs_decided_total",
                                            "shard")
        proof.holders.append(("end, spread over the replicas alive", {
            i: holder for i, (holder, _) in holders.items()}))
    finally:
        stop.set()
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        await admin.close()
        await carol.close()
    _read_decided(operators, proof)
    for (namespace, _), who in proof.decided.items():
        assert all(shard == shard_of(namespace, shards) for shard, _ in who)
    return proof


def _read_decided(operators: dict[str, OperatorProcess], proof: ShardProof) -> None:
    """`proof.decided` (and `proof.cancelled`) from every replica's log as it is now."""
    proof.decided.clear()
    proof.cancelled.clear()
    for name, operator in operators.items():
        held: set[int] = set()
        for line in operator.log_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            message = str(record.get("message", ""))
            if match := DECIDED.match(message):
                key = (match["namespace"], match["run"])
                proof.decided.setdefault(key, []).append((int(match["shard"]), match["identity"]))
            elif match := HOLDING.match(message):
                (held.discard if match["no"] else held.add)(int(match["shard"]))
            elif message == CANCELLED and held:
                proof.cancelled.append((frozenset(held), name, datetime.fromisoformat(str(record["time"]))))


async def _until_logged(operators: dict[str, OperatorProcess], proof: ShardProof, timeout: float = 60.0) -> None:
    """Wait until every finished run has its decider's log line (or a killed or paused decider).

    The watch can show a run's final status before the replica that wrote it has logged (and counted) the
    decision: its answer and the watch event leave the API server together, and a loaded machine may run the
    watcher first. Bounded, so a run nobody decided still shows up in `problems()`."""
    deadline = time.monotonic() + timeout
    while True:
        _read_decided(operators, proof)
        if not proof.undecided() or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.2)


async def _all_held(api: KubeApi, shards: int) -> dict[int, tuple[str, datetime | None]] | None:
    holders = await lease_holders(api, shards)
    return holders if len(holders) == shards else None


async def _spread(api: KubeApi, shards: int, replicas: set[str]) -> dict[int, tuple[str, datetime | None]] | None:
    """The holders once every shard is held and every replica holds its share (or one less)."""
    holders = await lease_holders(api, shards)
    counts = Counter(holder for holder, _ in holders.values())
    share = -(-shards // len(replicas))
    least = 1 if len(replicas) <= shards else 0
    if len(holders) < shards or any(counts[name] > share or counts[name] < least for name in replicas):
        return None
    return holders


async def _wait_finished(proof: ShardProof, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while len([p for p in proof.runs.values() if p in TERMINAL]) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} runs finished in {TIMEOUT:.0f} s")
        await asyncio.sleep(0.2)


async def _disrupt(api: KubeApi, operators: dict[str, OperatorProcess], proof: ShardProof, shards: int,
                   signal_name: str, avoid: set[int]) -> None:
    """Kill or pause the holder of one shard (not in `avoid`); wait for another replica to take it over."""
    holders = await wait_until("holder of every shard", lambda: _all_held(api, shards))
    shard = next(index for index in sorted(holders) if index not in avoid)
    victim = holders[shard][0]
    held = frozenset(index for index, (holder, _) in holders.items() if holder == victim)
    signalled = datetime.now(UTC)
    if signal_name == "SIGKILL":
        operators[victim].kill()
    else:
        operators[victim].pause()
    proof.disrupted.append((held, victim, datetime.now(UTC)))

    async def taken_over() -> tuple[str, datetime | None] | None:
        now = await lease_holders(api, shards)
        return now[shard] if shard in now and now[shard][0] != victim else None

    try:
        holder, acquired = await wait_until(f"take-over of shard {shard}", taken_over)
    finally:
        if signal_name == "SIGSTOP":
            operators[victim].resume()
    took = (acquired - signalled).total_seconds() if acquired else float("nan")
    proof.takeovers.append((signal_name, shard, victim, holder, took))


def report(proof: ShardProof, runs: int, namespaces: int, replicas: int, shards: int) -> None:
    spread = Counter(shard_of(f"bench-{i}", shards) for i in range(namespaces))
    print(f"\n### {runs} runs of {SHAPE.name} in {namespaces} namespaces, {replicas} replicas, {shards} shards\n")
    print(f"namespaces per shard: {dict(sorted(spread.items()))}; runs finished in {proof.seconds:.1f} s; "
          f"succeeded {runs - len(proof.not_succeeded)} of {runs}")
    for moment, holders in proof.holders:
        print(f"holders at the {moment}: {dict(sorted(holders.items()))}")
    print(table(["signal", "shard", "holder", "taken over by", "seconds to the new acquireTime"],
                [[s, str(i), old, new, f"{took:.1f}"] for s, i, old, new, took in proof.takeovers]))
    print()
    print(table(["shard", "runs decided"], [[str(k), str(v)] for k, v in sorted(proof.per_shard().items())]))
    print(f"\nbusiest shard over the mean: {proof.split() * 100:.0f} %")
    print(table(["replica", "runs decided"], [[k, str(v)] for k, v in sorted(proof.per_replica().items())]))
    decided_once = sum(1 for who in proof.deciders().values() if len(who) == 1)
    unlogged = sum(1 for who in proof.deciders().values() if "unlogged" in who[0][1])
    steps = sum(len(names) for names in proof.jobs.values())
    print(f"\nruns decided exactly once: {decided_once} of {runs} ({unlogged} by a killed or paused holder just "
          f"before its signal, without its log line); step Jobs {steps} for {len(proof.jobs)} steps")


def main() -> None:
    runs = int(os.environ.get("BENCH_SHARD_RUNS", "300"))
    namespaces = int(os.environ.get("BENCH_SHARD_NAMESPACES", "30"))
    replicas = int(os.environ.get("BENCH_SHARD_REPLICAS", "3"))
    shards = int(os.environ.get("BENCH_SHARDS", "3"))
    print("shard bench: real API server, kube-scheduler, Job controller; kwok as the node")
    with sim_cluster() as cluster:
        proof = asyncio.run(shard_proof(cluster, runs=runs, namespaces=namespaces, replicas=replicas, shards=shards))
    report(proof, runs, namespaces, replicas, shards)
    problems = proof.problems()
    if problems:
        sys.exit("shard bench: " + "; ".join(problems))


if __name__ == "__main__":
    main()

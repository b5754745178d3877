"""What a chaos scenario counted, the invariants it checks, and the table it prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.chaos.events import Happened
from tests.chaos.jobwatch import Attempt
from towline_dev.node.idempotencysink import SinkCounts

if TYPE_CHECKING:
    from tests.chaos.scenario import ChaosSettings


@dataclass
class ChaosReport:
    settings: ChaosSettings
    seconds: float
    operator_cpu: float
    happened: list[Happened]
    runs: dict[str, dict[str, Any]]
    created: int
    jobs_per_attempt: dict[Attempt, int]
    sink: SinkCounts
    watch_reconnects: int
    operators_running: bool
    operator_exits: list[str]
    """Replicas that exited by themselves and were started again (reported, not a violation)."""

    def phase(self, run: str) -> str:
        return str((self.runs.get(run, {}).get("status") or {}).get("phase") or "")

    @property
    def phases(self) -> Counter[str]:
        return Counter(self.phase(name) for name in self.runs)

    @property
    def lost(self) -> list[str]:
        """Runs that never reached a terminal phase (or vanished)."""
        terminal = {"Succeeded", "Failed", "Cancelled"}
        missing = self.created - len(self.runs)
        return sorted(name for name in self.runs if self.phase(name) not in terminal) + ["(deleted)"] * missing

    def jobs_per_step(self) -> Counter[tuple[str, str]]:
        counts: Counter[tuple[str, str]] = Counter()
        for (run, step, _), jobs in self.jobs_per_attempt.items():
            counts[(run, step)] += jobs
        return counts

    def violations(self) -> list[str]:
        """Every broken invariant, one line each; empty when the scenario held."""
        found: list[str] = []
        if self.lost:
            found.append(f"{len(self.lost)} runs lost (never finished): {self.lost[:10]}")
        for name in sorted(self.runs):
            if self.phase(name) in {"Failed", "Cancelled"}:
                status = self.runs[name].get("status") or {}
                found.append(f"run {name} {self.phase(name)}: {status.get('message')}")
        doubled = {attempt: jobs for attempt, jobs in self.jobs_per_attempt.items() if jobs > 1}
        if doubled:
            found.append(f"{len(doubled)} step attempts got more than one Job: {sorted(doubled.items())[:10]}")
        if self.sink.steps_applied_twice:
            found.append(f"steps applied more than once (a new key for the same step): "
                         f"{sorted(self.sink.steps_applied_twice.items())[:10]}")
        if self.sink.without_key:
            found.append(f"{self.sink.without_key} sink requests carried no Idempotency-Key")
        jobs = self.jobs_per_step()
        extra = {step: calls for step, calls in self.sink.arrivals_per_step.items()
                 if calls > jobs.get((step[0], step[1].replace("_", "-")), 0)}
        if extra:
            found.append(f"steps that called the sink more often than they had Jobs (an attempt ran twice): "
                         f"{sorted(extra.items())[:10]}")
        for name in sorted(self.runs):
            if self.phase(name) != "Succeeded":
                continue
            for step in self.settings.steps:
                if self.sink.applied_per_step.get((name, step), 0) != 1:
                    found.append(f"run {name} Succeeded but its step {step} was applied "
                                 f"{self.sink.applied_per_step.get((name, step), 0)} times at the sink")
        unaccounted = self.jobs_unaccounted_for()
        if unaccounted:
            found.append(f"Jobs whose attempts the run's status does not record (or records without a Job): "
                         f"{unaccounted[:10]}")
        if not self.operators_running:
            found.append("an operator replica was not running at the end")
        return found

    def jobs_unaccounted_for(self) -> list[str]:
        """Per step, the attempts that had Jobs must be exactly 1..the attempt its status records:
        a Job beyond it ran without the run knowing, a recorded attempt without a Job never ran."""
        had: dict[tuple[str, str], set[int]] = {}
        for run, step, attempt in self.jobs_per_attempt:
            had.setdefault((run, step), set()).add(int(attempt))
        found = []
        for name, run in self.runs.items():
            for step in (run.get("status") or {}).get("steps") or []:
                key = (name, str(step.get("id", "")).replace("_", "-"))
                recorded = set(range(1, int(step.get("attempt") or 0) + 1))
                if had.get(key, set()) != recorded:
                    found.append(f"{key[0]}/{key[1]}: Jobs for attempts {sorted(had.get(key, set()))}, "
                                 f"status records {sorted(recorded)}")
        return found

    def retries(self) -> int:
        return sum(int(attempt) > 1 for (_, _, attempt) in self.jobs_per_attempt)

    def table(self) -> str:
        kinds = Counter(h.kind for h in self.happened)
        phases = self.phases
        rows = [
            ("runs created", self.created),
            ("finished Succeeded", phases.get("Succeeded", 0)),
            ("finished Failed (or Cancelled)", phases.get("Failed", 0) + phases.get("Cancelled", 0)),
            (f"lost (not finished within {self.settings.timeout:.0f} s)", len(self.lost)),
            ("step Jobs", sum(self.jobs_per_attempt.values())),
            ("step attempts", len(self.jobs_per_attempt)),
            ("of which retries (attempt > 1)", self.retries()),
            ("step attempts with more than one Job", sum(j > 1 for j in self.jobs_per_attempt.values())),
            ("sink requests", self.sink.requests),
            ("idempotency keys seen = changes applied", self.sink.keys),
            ("duplicates arrived (answered, not applied)", self.sink.duplicates),
            ("replies lost on purpose (503 after applying)", self.sink.lost_replies),
            ("steps applied more than once", len(self.sink.steps_applied_twice)),
            ("disruptions: SIGKILL / SIGSTOP / API server / etcd",
             f"{kinds['kill']} / {kinds['pause']} / {kinds['apiserver']} / {kinds['etcd']}"),
            ("operator exits by themselves (restarted)", len(self.operator_exits)),
            ("wall time, runs created -> all finished", f"{self.seconds:.0f} s"),
            ("operator CPU seconds (all replicas)", f"{self.operator_cpu:.1f}"),
        ]
        width = max(len(label) for label, _ in rows)
        lines = [f"| {'what'.ljust(width)} | count |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {label.ljust(width)} | {value} |" for label, value in rows]
        timeline = [f"  {h.at:6.1f} s {h.kind:<9} {h.target:<20} {h.took:5.1f} s  ({h.finished_runs} runs finished "
                    "before)" for h in self.happened]
        return "\n".join([*lines, "", "disruptions (seconds after the runs were created):", *timeline])

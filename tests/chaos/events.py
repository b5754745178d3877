"""The chaos: a seeded, shuffled list of disruptions, carried out one after another.

- `kill`: SIGKILL the Lease holder (no goodbye), start it again 0.5-3 s later;
- `pause`: SIGSTOP the Lease holder for the Lease duration plus 1-3 s (past its renew
  deadline, so the other replica takes over), then SIGCONT: it must step down, not act;
- `apiserver` / `etcd`: stop the component and start it with the same flags and data;
  the kubelet, the controllers and the operators must reconnect by themselves.

Each gap before a disruption is drawn from the same generator, so a seed replays the plan.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.chaos.operators import LEASE_SECONDS, Replicas
from towline_dev.controlplane import ControlPlane


@dataclass(frozen=True)
class Disruption:
    kind: str
    """kill, pause, apiserver or etcd"""
    gap: float
    """Seconds to wait before it, after the previous one ended."""
    hold: float
    """kill: seconds until the restart; pause: seconds stopped; a restart: seconds down."""


@dataclass
class Happened:
    kind: str
    at: float
    """Seconds since the chaos started."""
    target: str
    took: float
    finished_runs: int
    """Runs already finished when it began (shows it hit work in flight)."""


def plan(seed: int, *, kills: int, pauses: int, apiserver: int = 1, etcd: int = 1,
         gaps: tuple[float, float] = (2.0, 8.0)) -> list[Disruption]:
    rng = random.Random(seed)
    kinds = ["kill"] * kills + ["pause"] * pauses + ["apiserver"] * apiserver + ["etcd"] * etcd
    rng.shuffle(kinds)
    holds = {"kill": (0.5, 3.0), "pause": (LEASE_SECONDS + 1.0, LEASE_SECONDS + 3.0), "apiserver": (0.0, 2.0),
             "etcd": (0.0, 2.0)}
    return [Disruption(kind, round(rng.uniform(*gaps), 2), round(rng.uniform(*holds[kind]), 2)) for kind in kinds]


def carry_out(disruptions: list[Disruption], plane: ControlPlane, replicas: Replicas,
              finished_runs: Callable[[], int], log: Callable[[str], None],
              before: Callable[[], None] = lambda: None) -> list[Happened]:
    """On the thread that lives longest (the main one): what it restarts dies with the thread."""
    started = time.monotonic()
    happened: list[Happened] = []
    for disruption in disruptions:
        time.sleep(disruption.gap)
        before()
        at, done = time.monotonic() - started, finished_runs()
        target = _disrupt(disruption, plane, replicas)
        took = time.monotonic() - started - at
        happened.append(Happened(disruption.kind, round(at, 1), target, round(took, 1), done))
        log(f"{at:6.1f} s  {disruption.kind:<9} {target:<20} took {took:4.1f} s  ({done} runs finished before)")
    return happened


def _disrupt(disruption: Disruption, plane: ControlPlane, replicas: Replicas) -> str:
    if disruption.kind in ("apiserver", "etcd"):
        component = "kube-apiserver" if disruption.kind == "apiserver" else "etcd"
        plane.restart_component(component, down_seconds=disruption.hold)
        return component
    # The holder as the API server last recorded it; the first replica if it cannot say.
    target = replicas.leader() or replicas.processes[0]
    if disruption.kind == "kill":
        replicas.kill(target)
        time.sleep(disruption.hold)
        replicas.restart(target)
    else:
        target.pause()
        time.sleep(disruption.hold)
        target.resume()
    return target.identity

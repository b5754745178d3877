"""The shard proof's count of who decided each run (tests/bench/bench_shards.py), on a made-up record.

A run whose final status landed but whose decider logged nothing counts as the decision of the holder that was
SIGKILLed or SIGSTOPped after the pass that decided it began (finishedAt), for any shard that holder held then;
any other run without a log line is "decided by no replica"."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.bench.bench_shards import ShardProof, _read_decided

SIGNAL = datetime(2026, 12, 5, 16, 47, 9, tzinfo=UTC)
# shard_of over 3 shards: bench-8 and bench-2 are in shard 0, bench-1 in shard 1, bench-0 in shard 2.


def proof(finished: dict[tuple[str, str], datetime]) -> ShardProof:
    record = ShardProof(shards=3)
    record.runs = {key: "Succeeded" for key in finished}
    record.finished_at = dict(finished)
    record.decided = {("bench-2", "run-1"): [(0, "towline-operator-2")]}
    record.disrupted = [(frozenset({0, 1}), "towline-operator-2", SIGNAL)]
    return record


def test_a_run_the_paused_holder_decided_before_its_signal_without_a_log_line_is_that_holders() -> None:
    record = proof({("bench-2", "run-1"): SIGNAL, ("bench-8", "run-26"): SIGNAL - timedelta(seconds=1),
                    ("bench-1", "run-3"): SIGNAL})
    assert record.problems() == []
    assert record.unlogged_decider(("bench-1", "run-3")) == "towline-operator-2", "every shard it held counts"
    assert record.deciders()[("bench-8", "run-26")] == [(0, "towline-operator-2 (unlogged, killed or paused)")]


def test_an_unlogged_run_finished_after_the_signal_or_in_a_shard_the_victim_did_not_hold_is_decided_by_nobody() -> None:
    after = proof({("bench-8", "run-26"): SIGNAL + timedelta(seconds=1)})
    assert after.problems() == ["1 runs were decided by no replica, e.g. [('bench-8', 'run-26')]"]
    elsewhere = proof({("bench-0", "run-5"): SIGNAL - timedelta(seconds=1)})
    assert elsewhere.problems() == ["1 runs were decided by no replica, e.g. [('bench-0', 'run-5')]"]


def test_an_unlogged_run_of_a_holder_that_cancelled_its_passes_on_losing_the_lease_is_that_holders() -> None:
    """A Lease renewed too late on a loaded machine: the holder cancels its passes, a status write under way may
    have landed without its log line. Only for the shards that holder held, and only for passes begun before."""
    record = proof({("bench-0", "run-18"): SIGNAL - timedelta(seconds=1)})
    assert record.problems() == ["1 runs were decided by no replica, e.g. [('bench-0', 'run-18')]"]
    record.cancelled = [(frozenset({2}), "towline-operator-0", SIGNAL)]
    assert record.problems() == []
    assert record.unlogged_decider(("bench-0", "run-18")) == "towline-operator-0"
    later = proof({("bench-0", "run-18"): SIGNAL + timedelta(seconds=1)})
    later.cancelled = [(frozenset({2}), "towline-operator-0", SIGNAL)]
    assert later.undecided() == [("bench-0", "run-18")]


class LoggedReplica:
    def __init__(self, *messages: tuple[str, str]) -> None:
        self.lines = [json.dumps({"time": at, "message": message}) for at, message in messages]

    def log_text(self) -> str:
        return "\n".join(self.lines)


def test_a_replicas_log_gives_its_decisions_and_its_cancelled_passes_with_the_shards_it_held_then() -> None:
    record = ShardProof(shards=3)
    replica = LoggedReplica(
        ("2026-12-05T16:47:00.000+00:00", "holding shard 2 of 3"),
        ("2026-12-05T16:47:01.000+00:00", "holding shard 0 of 3"),
        ("2026-12-05T16:47:02.000+00:00", "bench-0/run-1: decided Succeeded (shard 2 of 3, towline-operator-0)"),
        ("2026-12-05T16:47:03.000+00:00", "no longer holding shard 0 of 3"),
        ("2026-12-05T16:47:09.000+00:00", "lost the Lease during a pass; cancelling it"),
    )
    _read_decided({"towline-operator-0": replica}, record)  # type: ignore[dict-item]
    assert record.decided == {("bench-0", "run-1"): [(2, "towline-operator-0")]}
    assert record.cancelled == [(frozenset({2}), "towline-operator-0", SIGNAL)]

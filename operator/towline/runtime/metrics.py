"""The work queues' metrics, named as client-go's workqueue metrics are (prefix `towline_workqueue_`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

DEPTH = Gauge("towline_workqueue_depth", "Keys waiting to be processed.", ["name"])
ADDS = Counter("towline_workqueue_adds_total", "Keys added (a key already waiting is not counted).", ["name"])
RETRIES = Counter("towline_workqueue_retries_total", "Keys requeued with backoff after a failed pass.", ["name"])
GAVE_UP = Counter(
    "towline_workqueue_gave_up_total", "Keys whose retry budget ran out (the run got a condition).", ["name"]
)
QUEUE_DURATION = Histogram(
    "towline_workqueue_queue_duration_seconds", "Time a key waited before a worker took it.", ["name"],
    buckets=_BUCKETS,
)
WORK_DURATION = Histogram(
    "towline_workqueue_work_duration_seconds", "Time one pass over a key took.", ["name"], buckets=_BUCKETS
)

CACHE_READS = Counter(
    "towline_runtime_observations_total",
    "How reconciles saw a run's children: from the watch-fed cache (hit) or by listing (listed).", ["source"],
)

SHARD_HELD = Gauge(
    "towline_shard_held", "1 while this replica holds the shard's Lease (and acts on its namespaces), else 0.",
    ["shard"],
)
SHARD_RUNS_DECIDED = Counter(
    "towline_shard_runs_decided_total",
    "Runs this replica's own status write moved to a final phase, by the shard of their namespace.", ["shard"],
)

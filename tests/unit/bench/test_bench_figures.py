"""The benchmarks' figures: Prometheus text, deltas, percentiles, request splits, /proc memory."""

from __future__ import annotations

from collections import Counter

import pytest
from tests.bench.figures import (
    counts_by,
    cpu_ticks,
    delta,
    latency_row,
    percentile,
    rss_kib,
    samples,
    split_reads_writes,
)

METRICS = """# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="jobs",scope="resource",subresource="",verb="GET"} 3
apiserver_request_total{code="201",resource="jobs",scope="namespace",subresource="",verb="POST"} 7
apiserver_request_total{code="200",resource="workflowruns",scope="resource",subresource="status",verb="PUT"} 2e+01
apiserver_request_total{code="409",resource="jobs",scope="namespace",subresource="",verb="POST"} 1
apiserver_request_duration_seconds_count{verb="GET"} 99
towline_api_requests_total{code="200",resource="a \\"quoted\\" one",verb="GET"} 4.0
"""


def test_samples_are_read_with_their_labels_and_values() -> None:
    found = samples(METRICS, "apiserver_request_total")
    assert len(found) == 4
    assert found[2][0]["subresource"] == "status"
    assert found[2][1] == 20.0


def test_a_metric_whose_name_only_starts_alike_is_not_counted() -> None:
    assert sum(counts_by(METRICS, "apiserver_request").values()) == 0


def test_escaped_quotes_in_label_values_are_unescaped() -> None:
    assert counts_by(METRICS, "towline_api_requests_total", "resource") == Counter({('a "quoted" one',): 4})


def test_counts_are_grouped_by_the_named_labels_and_filtered() -> None:
    assert counts_by(METRICS, "apiserver_request_total", "verb") == Counter({("GET",): 3, ("POST",): 8, ("PUT",): 20})
    assert counts_by(METRICS, "apiserver_request_total", "verb", where={"code": "409"}) == Counter({("POST",): 1})


def test_delta_keeps_only_what_grew() -> None:
    before = Counter({("GET",): 3, ("POST",): 8})
    after = Counter({("GET",): 3, ("POST",): 10, ("PUT",): 1})
    assert delta(after, before) == Counter({("POST",): 2, ("PUT",): 1})


def test_reads_and_writes_by_verb_in_either_spelling() -> None:
    assert split_reads_writes({"GET": 3, "LIST": 2, "WATCH": 1, "POST": 4, "PATCH": 2, "PUT": 1, "DELETE": 1}) == (6, 8)
    assert split_reads_writes({"get": 1, "post": 2}) == (1, 2)


def test_percentiles_are_nearest_rank_values_that_were_observed() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.95) == 95.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([7.0], 0.5) == 7.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_a_percentile_of_nothing_or_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)
    with pytest.raises(ValueError, match="fraction"):
        percentile([1.0], 0)


def test_a_latency_row_is_in_milliseconds() -> None:
    assert latency_row("gap", [0.010, 0.020, 0.030]) == ["gap", "3", "20 ms", "30 ms", "30 ms", "30 ms"]
    assert latency_row("none", []) == ["none", "0", "-", "-", "-", "-"]


def test_resident_memory_and_its_peak_come_from_proc_status() -> None:
    text = "Name:\tpython3\nVmPeak:\t  900000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\nThreads:\t4\n"
    assert rss_kib(text) == (100000, 123456)
    with pytest.raises(ValueError, match="VmRSS"):
        rss_kib("Name:\tkthreadd\n")


def test_cpu_ticks_are_user_plus_system_time_counted_after_the_command_name() -> None:
    # The command name may hold spaces and parentheses; fields 14 (utime) and 15 (stime) follow it.
    text = "4242 (python (x) y) S 1 4242 4242 0 -1 4194304 2966 6548 0 0 1234 567 5 3 20 0 4 0 488 172 3485\n"
    assert cpu_ticks(text) == 1234 + 567

"""Pure helpers the benchmarks share: Prometheus text parsing, percentiles, request splits, tables.

No I/O here, so they are unit-tested (tests/unit/bench).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

READ_VERBS = frozenset({"GET", "LIST", "WATCH"})
WRITE_VERBS = frozenset({"POST", "CREATE", "PUT", "UPDATE", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})


def samples(text: str, metric: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of `metric` in Prometheus text exposition: (labels, value)."""
    found = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != metric:
            continue
        labels = {key: value.replace('\\"', '"').replace("\\\\", "\\")
                  for key, value in _LABEL.findall(match.group(2) or "")}
        found.append((labels, float(match.group(3))))
    return found


def counts_by(text: str, metric: str, *labels: str, where: Mapping[str, str] | None = None) -> Counter[tuple[str, ...]]:
    """Sum `metric` grouped by the values of `labels` (a missing label counts as ""), optionally filtered."""
    totals: Counter[tuple[str, ...]] = Counter()
    for sample_labels, value in samples(text, metric):
        if where and any(sample_labels.get(k) != v for k, v in where.items()):
            continue
        totals[tuple(sample_labels.get(label, "") for label in labels)] += int(value)
    return totals


def delta(after: Counter[tuple[str, ...]], before: Counter[tuple[str, ...]]) -> Counter[tuple[str, ...]]:
    """What a counter grew by between two scrapes (counters only grow; a reset shows as nothing)."""
    return Counter({key: after[key] - before.get(key, 0) for key in after if after[key] > before.get(key, 0)})


def resource_key(resource: str, subresource: str) -> str:
    return f"{resource}/{subresource}" if subresource else resource


def split_reads_writes(by_verb: Mapping[str, int]) -> tuple[int, int]:
    """(reads, writes) of request counts keyed by verb, in either the API server's or a client's spelling."""
    reads = sum(count for verb, count in by_verb.items() if verb.upper() in READ_VERBS)
    writes = sum(count for verb, count in by_verb.items() if verb.upper() in WRITE_VERBS)
    return reads, writes


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (0 < fraction <= 1): a value that was actually observed."""
    if not values:
        raise ValueError("no values to take a percentile of")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], not {fraction}")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def latency_row(name: str, seconds: Sequence[float]) -> list[str]:
    """A table row: name, n, p50, p95, p99, max, in milliseconds."""
    if not seconds:
        return [name, "0", "-", "-", "-", "-"]
    return [name, str(len(seconds)), *(f"{percentile(seconds, f) * 1000:.0f} ms" for f in (0.5, 0.95, 0.99)),
            f"{max(seconds) * 1000:.0f} ms"]


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table, so the printed figures paste into docs/benchmarks.md as they are."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def rss_kib(proc_status: str) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB from the text of /proc/<pid>/status: the resident set now and its peak."""
    fields = {}
    for line in proc_status.splitlines():
        key, _, rest = line.partition(":")
        if key in {"VmRSS", "VmHWM"}:
            fields[key] = int(rest.split()[0])
    if set(fields) != {"VmRSS", "VmHWM"}:
        raise ValueError("no VmRSS/VmHWM in the process status (is it a kernel thread or already gone?)")
    return fields["VmRSS"], fields["VmHWM"]


def cpu_ticks(proc_stat: str) -> int:
    """utime + stime, in clock ticks, from the text of /proc/<pid>/stat: the CPU the process has used so far
    (all its threads). The command name is in parentheses and may hold spaces, so fields count after it."""
    fields = proc_stat[proc_stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5); the state (field 3) is fields[0]

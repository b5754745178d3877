"""Reading an operator's /metrics: one scrape as samples keyed by name and labels, and one sample's value."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from tests.integration.support import wait_for

from towline_dev.install import OperatorProcess

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _metrics_text(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())
    except OSError:
        return None


def scrape(operator: OperatorProcess) -> Samples:
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    # The operator's endpoint comes up a moment after the process starts.
    text: str = wait_for(f"{url} to answer", lambda: _metrics_text(url), timeout=30)
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)

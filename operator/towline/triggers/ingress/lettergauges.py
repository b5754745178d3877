"""The ingress's dead-letter gauges: how many refused deliveries wait in each namespace, and since when.

Fed by one list+watch (towline.k8s.reflector) of the ConfigMaps named towline-dead-letters in every namespace, by
the field selector metadata.name=towline-dead-letters: the API server authorizes such a list or watch by that name,
so the ingress's ClusterRole grants list and watch with resourceNames and the ingress reads no other ConfigMap (it
may already get each of these). Each ConfigMap is kept as its summary only (per reason: the letters not replayed,
and when the oldest was refused), never a payload. The gauges are computed at scrape time, so a namespace whose
letters were replayed, dismissed or deleted drops out, and a restarted ingress reports from its first list:

- `towline_webhook_dead_letters{namespace,reason}`: letters kept and not yet replayed;
- `towline_webhook_dead_letter_oldest_timestamp_seconds{namespace,reason}`: when the oldest of them was refused.

Every replica watches, so each reports the same figures (the chart's alert takes the oldest over replicas).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from towline.jsontypes import JSON
from towline.k8s.client import CONFIG_MAPS, KubeApi
from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP, letters_of
from towline.k8s.indexer import Feed, ObjectKey, Store, object_key
from towline.k8s.streams import Following
from towline_connectors.wire import parse_rfc3339


@dataclass(frozen=True)
class Waiting:
    """The letters of one reason in one namespace that wait for a replay."""

    count: int
    oldest: float | None
    """When the oldest was refused (Unix time; None: no letter's time parses)."""


def _moment(text: str) -> float | None:
    try:
        return parse_rfc3339(text).timestamp()
    except ValueError:
        return None


def waiting_letters(config_map: JSON) -> dict[str, Waiting]:
    """By reason, the letters of one store not replayed yet."""
    counts: dict[str, int] = {}
    oldest: dict[str, float] = {}
    for letter in letters_of(config_map):
        if letter.replay_run:
            continue
        counts[letter.reason] = counts.get(letter.reason, 0) + 1
        moment = _moment(letter.failed_at)
        if moment is not None:
            oldest[letter.reason] = min(oldest.get(letter.reason, moment), moment)
    return {reason: Waiting(count, oldest.get(reason)) for reason, count in counts.items()}


class DeadLetterGauges(Collector):
    """The stores' summaries by namespace, as a watch shows them; the gauges at scrape time."""

    def __init__(self) -> None:
        self._stores: Store[ObjectKey, dict[str, Waiting]] = Store()
        self._feed = Feed(self._stores, key_of=object_key, value_of=waiting_letters)

    def take(self, event: str, body: JSON) -> None:
        """One event of the watch (towline.k8s.reflector): a (re-)list replaces what was known when it ends."""
        self._feed.take(event, body)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = GaugeMetricFamily(
            "towline_webhook_dead_letters",
            "Deliveries the ingress refused after authenticating them, kept as dead letters and not replayed.",
            labels=["namespace", "reason"])
        oldest = GaugeMetricFamily(
            "towline_webhook_dead_letter_oldest_timestamp_seconds",
            "When the oldest dead letter not replayed was refused (Unix time).", labels=["namespace", "reason"])
        for (namespace, _), waiting in sorted(self._stores.items()):
            for reason, letters in sorted(waiting.items()):
                counts.add_metric([namespace, reason], letters.count)
                if letters.oldest is not None:
                    oldest.add_metric([namespace, reason], letters.oldest)
        yield counts
        yield oldest


GAUGES = DeadLetterGauges()
"""The ingress process's gauges, on its /metrics from import on (empty until its watch lists)."""
REGISTRY.register(GAUGES)


def dead_letter_watch(api: KubeApi, gauges: DeadLetterGauges = GAUGES) -> Following:
    """The list+watch of every namespace's towline-dead-letters, into the gauges."""
    return Following(api, CONFIG_MAPS, gauges.take, what="dead-letter ConfigMap", task_name="dead-letter-gauges",
                     field_selector=f"metadata.name={DELIVERY_LETTERS_CONFIG_MAP}")

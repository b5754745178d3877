"""The ingress's dead-letter gauges follow what its watch shows: letters not replayed, per namespace and reason, and
when the oldest was refused; a replayed letter, a deleted store and a store gone while the watch was down leave
them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from towline.k8s.deliveryletters import DELIVERY_LETTERS_CONFIG_MAP, DeliveryLetter, letter_text, mark_key, mark_text
from towline.k8s.reflector import LISTED, SYNCED
from towline.triggers.ingress.lettergauges import DeadLetterGauges

Samples = dict[tuple[str, tuple[str, ...]], float]


def letter(reason: str, failed_at: str, namespace: str = "shop") -> DeliveryLetter:
    return DeliveryLetter(namespace=namespace, workflow="orders", trigger="paid", reason=reason, failed_at=failed_at,
                          size=2, payload={}, data={})


def store(namespace: str, *letters: DeliveryLetter, marks: dict[str, str] | None = None) -> dict[str, Any]:
    data = {kept.id: letter_text(kept) for kept in letters}
    data.update({mark_key(letter_id): mark_text("jane", run) for letter_id, run in (marks or {}).items()})
    return {"metadata": {"namespace": namespace, "name": DELIVERY_LETTERS_CONFIG_MAP}, "data": data}


def samples(gauges: DeadLetterGauges) -> Samples:
    return {(family.name, tuple(sample.labels.values())): sample.value
            for family in gauges.collect() for sample in family.samples}


def moment(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_letters_waiting_are_counted_per_namespace_and_reason_with_the_oldest() -> None:
    gauges = DeadLetterGauges()
    gauges.take(LISTED, store("shop", letter("Filtered", "2026-12-07T08:00:05Z"),
                              letter("Suspended", "2026-12-07T08:00:09Z"), letter("Suspended", "2026-12-07T08:00:03Z")))
    gauges.take(LISTED, store("billing", letter("ApiServerBusy", "2026-12-07T07:59:00Z", "billing")))
    gauges.take(SYNCED, {})
    assert samples(gauges) == {
        ("towline_webhook_dead_letters", ("billing", "ApiServerBusy")): 1,
        ("towline_webhook_dead_letters", ("shop", "Filtered")): 1,
        ("towline_webhook_dead_letters", ("shop", "Suspended")): 2,
        ("towline_webhook_dead_letter_oldest_timestamp_seconds", ("billing", "ApiServerBusy")):
            moment("2026-12-07T07:59:00Z"),
        ("towline_webhook_dead_letter_oldest_timestamp_seconds", ("shop", "Filtered")): moment("2026-12-07T08:00:05Z"),
        ("towline_webhook_dead_letter_oldest_timestamp_seconds", ("shop", "Suspended")):
            moment("2026-12-07T08:00:03Z"),
    }


def test_a_replayed_letter_no_longer_counts() -> None:
    gauges = DeadLetterGauges()
    old, new = letter("Suspended", "2026-12-07T08:00:01Z"), letter("Suspended", "2026-12-07T08:00:02Z")
    gauges.take("ADDED", store("shop", old, new))
    gauges.take("MODIFIED", store("shop", old, new, marks={old.id: "orders-paid-1"}))
    assert samples(gauges) == {
        ("towline_webhook_dead_letters", ("shop", "Suspended")): 1,
        ("towline_webhook_dead_letter_oldest_timestamp_seconds", ("shop", "Suspended")):
            moment("2026-12-07T08:00:02Z"),
    }
    gauges.take("MODIFIED", store("shop", old, new, marks={old.id: "orders-paid-1", new.id: "orders-paid-2"}))
    assert samples(gauges) == {}


def test_a_deleted_store_and_one_gone_while_the_watch_was_down_leave_the_gauges() -> None:
    gauges = DeadLetterGauges()
    gauges.take("ADDED", store("shop", letter("Filtered", "2026-12-07T08:00:01Z")))
    gauges.take("ADDED", store("billing", letter("Filtered", "2026-12-07T08:00:01Z", "billing")))
    gauges.take("DELETED", store("shop"))
    assert {labels[0] for _, labels in samples(gauges)} == {"billing"}
    gauges.take(SYNCED, {})  # a relist that found no store at all
    assert samples(gauges) == {}

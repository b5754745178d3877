"""The indexed store: lookups by index follow every put and pop, as client-go's Indexer."""

from __future__ import annotations

from towline.runtime.store import Store

Key = tuple[str, str]


def phases() -> Store[Key, str]:
    return Store(namespace=lambda key, phase: key[0],
                 running=lambda key, phase: key[0] if phase == "Running" else None)


def test_an_object_is_found_under_each_index_value_it_has_now() -> None:
    store = phases()
    store.put(("a", "r1"), "Running")
    store.put(("a", "r2"), "Pending")
    store.put(("b", "r3"), "Running")
    assert store.by("namespace", "a") == [(("a", "r1"), "Running"), (("a", "r2"), "Pending")]
    assert store.by("running", "a") == [(("a", "r1"), "Running")]

    assert store.put(("a", "r1"), "Succeeded") == "Running", "a put returns what it replaced"
    assert store.by("running", "a") == [], "re-filed when its value changed"
    assert store.by("namespace", "a") == [(("a", "r2"), "Pending"), (("a", "r1"), "Succeeded")]

    assert store.pop(("b", "r3")) == "Running"
    assert store.by("running", "b") == [] and store.by("namespace", "b") == []
    assert store.pop(("b", "r3")) is None
    assert len(store) == 2 and ("a", "r2") in store and store.get(("a", "r2")) == "Pending"


def test_an_unknown_index_value_is_empty_and_no_empty_buckets_are_kept() -> None:
    store = phases()
    assert store.by("namespace", "nowhere") == []
    store.put(("a", "r1"), "Running")
    store.pop(("a", "r1"))
    assert store._indexes == {"namespace": {}, "running": {}}


def test_going_through_a_copy_while_changing_the_store_is_safe() -> None:
    store = phases()
    for index in range(5):
        store.put(("a", f"r{index}"), "Running")
    for key, _ in store.by("running", "a"):
        store.put(key, "Succeeded")
    assert store.by("running", "a") == [] and len(store) == 5
    for key in store:
        store.pop(key)
    assert len(store) == 0

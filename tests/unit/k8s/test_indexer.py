"""The indexed store the watches feed: every index follows each put, update and pop, a (re-)list replaces the
contents and the indexes, and a lookup of a missing value is empty, as client-go's Indexer."""

from __future__ import annotations

import pytest

from towline.jsontypes import JSON
from towline.k8s.indexer import Feed, Index, Store, by_label, object_key
from towline.k8s.reflector import FAILED, LISTED, SYNCED

Key = tuple[str, str]

NAMESPACE: Index[Key, str, str] = Index("namespace", lambda key, phase: key[0])
RUNNING: Index[Key, str, str] = Index("running", lambda key, phase: key[0] if phase == "Running" else None)


def phases() -> Store[Key, str]:
    return Store(NAMESPACE, RUNNING)


def test_an_object_is_found_under_each_index_value_it_has_now() -> None:
    store = phases()
    store.put(("a", "r1"), "Running")
    store.put(("a", "r2"), "Pending")
    store.put(("b", "r3"), "Running")
    assert store.by(NAMESPACE, "a") == [(("a", "r1"), "Running"), (("a", "r2"), "Pending")]
    assert store.by(RUNNING, "a") == [(("a", "r1"), "Running")]
    assert store.keys_by(NAMESPACE, "b") == [("b", "r3")] and store.count_by(RUNNING, "b") == 1

    assert store.put(("a", "r1"), "Succeeded") == "Running", "a put returns what it replaced"
    assert store.by(RUNNING, "a") == [], "re-filed when its value changed"
    assert store.by(NAMESPACE, "a") == [(("a", "r2"), "Pending"), (("a", "r1"), "Succeeded")]

    assert store.pop(("b", "r3")) == "Running"
    assert store.by(RUNNING, "b") == [] and store.by(NAMESPACE, "b") == []
    assert store.pop(("b", "r3")) is None
    assert len(store) == 2 and ("a", "r2") in store and store.get(("a", "r2")) == "Pending"


def test_a_lookup_of_a_missing_key_or_value_is_empty_and_no_empty_buckets_are_kept() -> None:
    store = phases()
    assert store.get(("a", "nowhere")) is None
    assert store.by(NAMESPACE, "nowhere") == [] and store.keys_by(RUNNING, "x") == []
    assert store.count_by(RUNNING, "x") == 0
    store.put(("a", "r1"), "Running")
    store.pop(("a", "r1"))
    assert store._indexes["namespace"][1] == {} and store._indexes["running"][1] == {}, (
        "the store keeps what it is given, nothing more")


def test_a_lookup_through_an_index_the_store_does_not_have_is_refused() -> None:
    other: Index[Key, str, str] = Index("namespace", lambda key, phase: key[1])
    with pytest.raises(KeyError, match="no index 'namespace'"):
        phases().by(other, "a")
    with pytest.raises(ValueError, match="distinct names"):
        Store(NAMESPACE, NAMESPACE)


def test_going_through_a_copy_while_changing_the_store_is_safe() -> None:
    store = phases()
    for index in range(5):
        store.put(("a", f"r{index}"), "Running")
    for key, _ in store.by(RUNNING, "a"):
        store.put(key, "Succeeded")
    assert store.by(RUNNING, "a") == [] and len(store) == 5
    for key in store:
        store.pop(key)
    assert len(store) == 0


def test_a_replace_sets_the_contents_and_every_index_within_its_scope() -> None:
    store = phases()
    store.put(("a", "r1"), "Running")
    store.put(("a", "r2"), "Running")
    store.put(("b", "r3"), "Running")
    store.replace([(("a", "r2"), "Pending"), (("a", "r4"), "Running")], within=lambda key: key[0] == "a")
    assert sorted(store) == [("a", "r2"), ("a", "r4"), ("b", "r3")], "r1 went; b is another list's"
    assert store.keys_by(RUNNING, "a") == [("a", "r4")] and store.keys_by(RUNNING, "b") == [("b", "r3")]
    store.replace([])
    assert len(store) == 0 and store._indexes["namespace"][1] == {} and store._indexes["running"][1] == {}


def pod(name: str, run: str | None, version: str = "1", namespace: str = "shop") -> JSON:
    labels = {"towline.dev/run": run} if run else {}
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": version, "labels": labels}}


BY_RUN = by_label("run", "towline.dev/run")


def fed() -> tuple[Store[Key, JSON], Feed[Key, JSON]]:
    store: Store[Key, JSON] = Store(BY_RUN)
    return store, Feed(store, key_of=object_key, value_of=lambda body: body,
                       within=lambda key: key[0] == "shop")


def test_watch_events_keep_the_objects_and_the_label_index_right() -> None:
    store, feed = fed()
    feed.take("ADDED", pod("p1", "deploy-1"))
    feed.take("ADDED", pod("p2", "deploy-1"))
    feed.take("ADDED", pod("p3", None))
    assert store.keys_by(BY_RUN, ("shop", "deploy-1")) == [("shop", "p1"), ("shop", "p2")]
    assert len(store) == 3, "an object without the label is kept, filed under no run"
    feed.take("MODIFIED", pod("p2", "deploy-2", "2"))
    assert store.keys_by(BY_RUN, ("shop", "deploy-1")) == [("shop", "p1")], "a relabelled object moves"
    assert store.by(BY_RUN, ("shop", "deploy-2")) == [(("shop", "p2"), pod("p2", "deploy-2", "2"))]
    feed.take("DELETED", pod("p1", "deploy-1"))
    feed.take("DELETED", pod("gone", "deploy-1"))  # never seen: nothing to forget
    assert store.by(BY_RUN, ("shop", "deploy-1")) == [] and store.get(("shop", "p1")) is None


def test_a_list_again_replaces_the_contents_and_the_indexes_when_it_ends_and_a_failed_one_is_void() -> None:
    store, feed = fed()
    for name in ("p1", "p2"):
        feed.take(LISTED, pod(name, "deploy-1"))
    assert len(store) == 0, "a list counts once it ended"
    feed.take(SYNCED, {})
    store.put(("elsewhere", "p9"), pod("p9", "deploy-1", namespace="elsewhere"))  # another stream's scope
    feed.take(LISTED, pod("p1", "deploy-1", "5"))
    feed.take(FAILED, {})  # that list broke off: what it showed so far counts for nothing
    feed.take(LISTED, pod("p1", "deploy-3", "6"))
    assert store.get(("shop", "p2")) is not None, "until the list ends, lookups see the previous one"
    feed.take(SYNCED, {})
    assert store.get(("shop", "p2")) is None, "deleted while the watch was down"
    assert store.keys_by(BY_RUN, ("shop", "deploy-1")) == [], "and gone from the index"
    assert store.by(BY_RUN, ("shop", "deploy-3")) == [(("shop", "p1"), pod("p1", "deploy-3", "6"))]
    assert store.get(("elsewhere", "p9")) is not None, "a list speaks only for its own scope"

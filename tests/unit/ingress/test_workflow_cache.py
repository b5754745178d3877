"""The ingress's Workflow cache, fed by the one list+watch: ready after the first list, current with each change,
and a list again replaces it whole (a Workflow deleted while the watch was down is forgotten), while lookups
meanwhile see the previous list."""

from __future__ import annotations

from towline.jsontypes import JSON
from towline.k8s.reflector import FAILED, LISTED, SYNCED
from towline.k8s.workflowcache import WorkflowCache


def workflow(name: str, version: str = "1") -> JSON:
    return {"metadata": {"namespace": "shop", "name": name, "resourceVersion": version}}


def test_ready_after_the_first_list_and_current_with_each_change() -> None:
    cache = WorkflowCache(api=None)  # type: ignore[arg-type]
    cache.take(LISTED, workflow("orders"))
    assert not cache.synced.is_set() and cache.get("shop", "orders") is None
    cache.take(SYNCED, {})
    assert cache.synced.is_set() and cache.get("shop", "orders") == workflow("orders")
    cache.take("ADDED", workflow("refunds"))
    cache.take("MODIFIED", workflow("orders", "2"))
    cache.take("DELETED", workflow("refunds"))
    assert cache.get("shop", "orders") == workflow("orders", "2") and cache.get("shop", "refunds") is None
    assert len(cache) == 1


def test_a_list_again_replaces_the_cache_when_it_ends_and_a_failed_one_is_void() -> None:
    cache = WorkflowCache(api=None)  # type: ignore[arg-type]
    for name in ("orders", "refunds"):
        cache.take(LISTED, workflow(name))
    cache.take(SYNCED, {})
    cache.take(LISTED, workflow("orders", "5"))
    cache.take(FAILED, {})  # that list broke off: what it showed so far counts for nothing
    cache.take(LISTED, workflow("orders", "6"))
    assert cache.get("shop", "refunds") is not None, "until the list ends, lookups see the previous one"
    cache.take(SYNCED, {})
    assert cache.get("shop", "refunds") is None, "deleted while the watch was down"
    assert cache.get("shop", "orders") == workflow("orders", "6")

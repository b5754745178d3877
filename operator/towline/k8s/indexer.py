"""Watch-fed stores with named indexes and typed lookups, as client-go's `cache.Indexer`: the other half of the one
watch layer (towline.k8s.reflector lists and watches; a store keeps what it showed).

Every process's consumers keep what their streams show here: the operator's runs by Workflow and its runs'
children by run (towline.runtime.runstore, towline.runtime.cache), the ingress's Workflows
(towline.k8s.workflowcache), the archive's runs and their step pods and Approvals (towline.archive.pending). A
reader looks an object up by key or by an index's value instead of scanning everything; each `Index` maps an object
to one value, or to None when the object is not filed there, and its lookups are typed by that value.

A store keeps what it is given and nothing more: the values (a consumer trims them first, or keeps a summary) and,
per index value, the keys filed under it; a value with no keys left is dropped, so its memory follows its contents.
`Feed` applies the reflector's events to a store as client-go's reflector does: ADDED and MODIFIED put, DELETED
pops, and a (re-)list replaces the contents of its scope (and so every index) once it ended, so an object deleted
while the watch was down is forgotten. Nothing here talks to the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from towline.jsontypes import JSON
from towline.k8s.reflector import FAILED, LISTED, SYNCED

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
I = TypeVar("I", bound=Hashable)  # noqa: E741 - an index's value, as client-go's IndexFunc returns

ObjectKey = tuple[str, str]
"""(namespace, name): an object's key in a store (a cluster-scoped object's namespace is "")."""


@dataclass(frozen=True)
class Index(Generic[K, V, I]):
    """A named index: `of` files an object under one value (None: not filed here). Declared once, beside the store
    it indexes, and passed to `Store.by`, so a lookup names an index that exists with a value of its type."""

    name: str
    of: Callable[[K, V], I | None]


class Store(Generic[K, V]):
    """Objects by key, filed under each of its indexes."""

    def __init__(self, *indexes: Index[K, V, Any]) -> None:
        names = [index.name for index in indexes]
        if len(set(names)) != len(names):
            raise ValueError(f"a store's indexes need distinct names, got {names}")
        self._objects: dict[K, V] = {}
        self._indexes: dict[str, tuple[Index[K, V, Any], dict[Hashable, dict[K, None]]]] = {
            index.name: (index, {}) for index in indexes}
        """index name -> (the index, value -> the keys filed under it; a dict keeps insertion order)."""

    def put(self, key: K, value: V) -> V | None:
        """Add or replace; returns what was stored before."""
        before = self._objects.get(key)
        if before is not None:
            self._unfile(key, before)
        self._objects[key] = value
        for index, filed in self._indexes.values():
            indexed = index.of(key, value)
            if indexed is not None:
                filed.setdefault(indexed, {})[key] = None
        return before

    def pop(self, key: K) -> V | None:
        """Remove; returns what was stored (None: nothing was)."""
        before = self._objects.pop(key, None)
        if before is not None:
            self._unfile(key, before)
        return before

    def replace(self, objects: Iterable[tuple[K, V]], *, within: Callable[[K], bool] | None = None) -> None:
        """What a (re-)list showed becomes the contents: every key `within` its scope (None: every key) that it did
        not show is popped, and every object it showed is put."""
        shown = dict(objects)
        for key in [key for key in self._objects if key not in shown and (within is None or within(key))]:
            self.pop(key)
        for key, value in shown.items():
            self.put(key, value)

    def get(self, key: K) -> V | None:
        return self._objects.get(key)

    def by(self, index: Index[K, V, I], value: I) -> list[tuple[K, V]]:
        """The (key, object) pairs filed under `value` in `index`, oldest put first; empty when there are none."""
        return [(key, self._objects[key]) for key in self._filed(index).get(value, {})]

    def keys_by(self, index: Index[K, V, I], value: I) -> list[K]:
        """The keys filed under `value` in `index`, oldest put first."""
        return list(self._filed(index).get(value, {}))

    def count_by(self, index: Index[K, V, I], value: I) -> int:
        return len(self._filed(index).get(value, {}))

    def items(self) -> list[tuple[K, V]]:
        """A copy: callers may put and pop while they go through it."""
        return list(self._objects.items())

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __iter__(self) -> Iterator[K]:
        """Over a copy of the keys, as `items`."""
        return iter(list(self._objects))

    def __len__(self) -> int:
        return len(self._objects)

    def _filed(self, index: Index[K, V, I]) -> dict[Hashable, dict[K, None]]:
        kept = self._indexes.get(index.name)
        if kept is None or kept[0] is not index:
            raise KeyError(f"this store has no index {index.name!r}")
        return kept[1]

    def _unfile(self, key: K, value: V) -> None:
        for index, filed in self._indexes.values():
            indexed = index.of(key, value)
            if indexed is None:
                continue
            keys = filed.get(indexed)
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del filed[indexed]


def object_key(body: JSON) -> ObjectKey:
    """(namespace, name) of an API object."""
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def label_of(body: JSON, label: str) -> str | None:
    """The object's value of `label`, or None when it has none (or an empty one)."""
    return ((body.get("metadata") or {}).get("labels") or {}).get(label) or None


def by_label(name: str, label: str) -> Index[Any, JSON, ObjectKey]:
    """An index of API objects by (namespace, their value of `label`), for a store of whole or trimmed bodies:
    a run's children by its run label, as a live list selects them. An object without the label is not filed."""

    def of(key: Any, body: JSON) -> ObjectKey | None:
        value = label_of(body, label)
        return None if value is None else (str((body.get("metadata") or {}).get("namespace") or ""), value)

    return Index(name, of)


@dataclass
class Feed(Generic[K, V]):
    """A reflector's events into a store: ADDED and MODIFIED put, DELETED pops, and a (re-)list (its LISTED bodies,
    collected apart) replaces the store's contents `within` the stream's scope when it ends (SYNCED); until then
    lookups see what the store held. A failed stream's partial list is void (FAILED)."""

    store: Store[K, V]
    key_of: Callable[[JSON], K]
    value_of: Callable[[JSON], V]
    within: Callable[[K], bool] | None = None
    """The keys this stream's lists speak for (None: all): a store fed by several streams (one per namespace)
    forgets only what its own list no longer shows."""
    _listing: dict[K, V] = field(default_factory=dict)

    def take(self, event: str, body: JSON) -> None:
        if event == FAILED:
            self._listing = {}
        elif event == SYNCED:
            listing, self._listing = self._listing, {}
            self.store.replace(listing.items(), within=self.within)
        elif event == LISTED:
            self._listing[self.key_of(body)] = self.value_of(body)
        elif event == "DELETED":
            self.store.pop(self.key_of(body))
        else:
            self.store.put(self.key_of(body), self.value_of(body))

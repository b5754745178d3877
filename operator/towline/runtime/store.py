"""A watch-fed store with indexes, as client-go's `cache.Indexer`.

Watch events put and delete; readers look objects up by key or by an index
value instead of scanning everything (a Workflow's runs, when one of them
finishes, out of thousands). Each index maps an object to one value, or to
None when the object is not indexed there.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Indexer = Callable[[K, V], Hashable | None]


class Store(Generic[K, V]):
    def __init__(self, **indexers: Indexer[K, V]) -> None:
        self._objects: dict[K, V] = {}
        self._indexers = indexers
        self._indexes: dict[str, dict[Hashable, dict[K, None]]] = {name: {} for name in indexers}
        """index name -> value -> the keys filed under it (a dict keeps insertion order)."""

    def put(self, key: K, value: V) -> V | None:
        """Add or replace; returns what was stored before."""
        before = self._objects.get(key)
        if before is not None:
            self._unfile(key, before)
        self._objects[key] = value
        for name, indexer in self._indexers.items():
            indexed = indexer(key, value)
            if indexed is not None:
                self._indexes[name].setdefault(indexed, {})[key] = None
        return before

    def pop(self, key: K) -> V | None:
        before = self._objects.pop(key, None)
        if before is not None:
            self._unfile(key, before)
        return before

    def get(self, key: K) -> V | None:
        return self._objects.get(key)

    def by(self, index: str, value: Hashable) -> list[tuple[K, V]]:
        """The (key, object) pairs filed under `value` in `index`, oldest put first."""
        return [(key, self._objects[key]) for key in self._indexes[index].get(value, {})]

    def items(self) -> list[tuple[K, V]]:
        """A copy: callers may put and pop while they go through it."""
        return list(self._objects.items())

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._objects))

    def __len__(self) -> int:
        return len(self._objects)

    def _unfile(self, key: K, value: V) -> None:
        for name, indexer in self._indexers.items():
            indexed = indexer(key, value)
            if indexed is None:
                continue
            filed = self._indexes[name].get(indexed)
            if filed is not None:
                filed.pop(key, None)
                if not filed:
                    del self._indexes[name][indexed]

"""The informers' in-memory cache: objects by namespace/name, with indexes.

Invariant: for every index, `_index[name][value]` holds exactly the keys of
the stored objects whose indexer returns `value`; `_values` remembers what
each object was indexed under so a replace or delete can undo it exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controller.runtime.kube import JSON, key_of

Indexer = Callable[[JSON], Iterable[str]]


class Store:
    def __init__(self, indexers: dict[str, Indexer] | None = None) -> None:
        self._objects: dict[str, JSON] = {}
        self._indexers = dict(indexers or {})
        self._index: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._values: dict[str, dict[str, tuple[str, ...]]] = {}

    @property
    def indexers(self) -> dict[str, Indexer]:
        return dict(self._indexers)

    def add_indexers(self, indexers: dict[str, Indexer]) -> None:
        """client-go's AddIndexers: more indexes, computed over what is stored already.
        A name given twice must name the same function."""
        for name, indexer in indexers.items():
            if self._indexers.get(name, indexer) is not indexer:
                raise ValueError(f"index {name!r} exists with another function")
        new = {k: v for k, v in indexers.items() if k not in self._indexers}
        if not new:
            return
        self._indexers.update(new)
        self._index.update({name: {} for name in new})
        for key, obj in self._objects.items():
            self._unindex(key)
            self._reindex(key, obj)

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: str) -> bool:
        return key in self._objects

    def get(self, key: str) -> JSON | None:
        return self._objects.get(key)

    def keys(self) -> list[str]:
        return list(self._objects)

    def values(self) -> list[JSON]:
        return list(self._objects.values())

    def by_index(self, index: str, value: str) -> list[JSON]:
        return [self._objects[k] for k in self._index[index].get(value, ())]

    def upsert(self, obj: JSON) -> JSON | None:
        """Stores obj; returns the object it replaced, if any."""
        key = key_of(obj)
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key)
        self._objects[key] = obj
        self._reindex(key, obj)
        return old

    def remove(self, key: str) -> JSON | None:
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key)
        return old

    def _reindex(self, key: str, obj: JSON) -> None:
        if not self._indexers:
            return
        values = {}
        for name, indexer in self._indexers.items():
            vals = tuple(indexer(obj))
            values[name] = vals
            for v in vals:
                self._index[name].setdefault(v, set()).add(key)
        self._values[key] = values

    def _unindex(self, key: str) -> None:
        for name, vals in self._values.pop(key, {}).items():
            bucket = self._index[name]
            for v in vals:
                keys = bucket.get(v)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del bucket[v]

"""The Store's invariant (see controller/runtime/store.py): after any sequence of
upserts (new or replacing) and removes, every index equals one recomputed from the
stored objects, and no empty bucket is left behind; with a freeze rule, every read
gives back what was stored, and a frozen object is held as bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.runtime.kube import JSON, key_of
from controller.runtime.store import Indexer, Store

NAMES = ["a", "b", "c", "d"]
VALUES = ["x", "y", "z"]


def by_label(obj: JSON) -> list[str]:
    return list((obj["metadata"].get("labels") or {}).values())


def owners(obj: JSON) -> list[str]:
    # May repeat a value and may be empty: both must index and unindex cleanly.
    return list(obj.get("owners", []))


INDEXERS: dict[str, Indexer] = {"label": by_label, "owner": owners}


def obj(name: str, labels: dict[str, str], owner_list: list[str]) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels},
            "owners": owner_list}


upsert = st.builds(
    lambda name, labels, owner_list: ("upsert", obj(name, labels, owner_list)),
    st.sampled_from(NAMES),
    st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(VALUES), max_size=2),
    st.lists(st.sampled_from(VALUES), max_size=3),
)
remove = st.builds(lambda name: ("remove", f"ns/{name}"), st.sampled_from(NAMES))


def recomputed(store: Store) -> dict[str, dict[str, set[str]]]:
    index: dict[str, dict[str, set[str]]] = {name: {} for name in INDEXERS}
    for stored in store.values():
        for name, indexer in INDEXERS.items():
            for value in indexer(stored):
                index[name].setdefault(value, set()).add(key_of(stored))
    return index


def tier_z(obj: JSON) -> bool:
    """A freeze rule: some objects frozen, some not, and an object may move between."""
    return (obj["metadata"].get("labels") or {}).get("tier") == "z"


@given(st.lists(st.one_of(upsert, remove), max_size=40), st.booleans())
def test_indexes_always_equal_a_recomputation(ops: list[tuple[str, object]],
                                              freezing: bool) -> None:
    store = Store(INDEXERS, tier_z if freezing else None)
    model: dict[str, JSON] = {}
    for op, arg in ops:
        if op == "upsert":
            assert isinstance(arg, dict)
            key = f"ns/{arg['metadata']['name']}"
            assert store.upsert(arg) == model.get(key)
            model[key] = arg
            assert isinstance(store._objects[key], bytes) is (freezing and tier_z(arg))
        else:
            assert isinstance(arg, str)
            assert store.remove(arg) == model.pop(arg, None)
        assert {key_of(o): o for o in store.values()} == model
        assert all(store.get(k) == v for k, v in model.items())
        want = recomputed(store)
        assert store._index == want  # exact: no stale key, no empty bucket
        for name in INDEXERS:
            for value in VALUES:
                got = {f"ns/{o['metadata']['name']}" for o in store.by_index(name, value)}
                assert got == want[name].get(value, set())
    assert sorted(store.keys()) == sorted(model)
    assert len(store) == len(model)


def test_a_store_without_indexers_keeps_no_index_state() -> None:
    store = Store()
    store.upsert(obj("a", {"app": "x"}, ["x"]))
    store.remove("ns/a")
    assert store._values == {} and len(store) == 0


def test_add_indexers_indexes_what_is_stored_already_and_refuses_a_namesake() -> None:
    store = Store({"label": by_label})
    store.upsert(obj("a", {"app": "x"}, ["y"]))
    store.add_indexers({"owner": owners, "label": by_label})  # the same function: no change
    store.upsert(obj("b", {}, ["y"]))
    assert sorted(key_of(o) for o in store.by_index("owner", "y")) == ["ns/a", "ns/b"]
    assert [key_of(o) for o in store.by_index("label", "x")] == ["ns/a"]
    assert set(store.indexers) == {"label", "owner"}
    with pytest.raises(ValueError, match="'owner' exists with another function"):
        store.add_indexers({"owner": by_label})

"""The Store's invariant (see controller/runtime/store.py): after any sequence of
upserts (new or replacing) and removes, every index equals one recomputed from the
stored objects, and no empty bucket is left behind; with a freeze rule, every read
gives back what was stored, and a frozen object is held packed (bytes)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.runtime.kube import JSON, key_of
from controller.runtime.store import Indexer, Packer, Store

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


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30)


@given(st.lists(st.dictionaries(st.text(), json_values, max_size=6), min_size=1, max_size=8))
def test_packed_objects_unpack_to_what_was_packed(objects: list[JSON]) -> None:
    """Packer's invariant: the dictionary is the first object's JSON and never changes, so
    every object packed, before or after any other, unpacks to itself."""
    packer = Packer()
    packed = [packer.pack(o) for o in objects]
    assert [packer.unpack(p) for p in reversed(packed)] == list(reversed(objects))


def test_packing_against_the_first_object_is_what_makes_a_similar_one_small() -> None:
    """The point of the dictionary: a second object much like the first (a BuildRun of the
    same Build, another uid) packs to a small fraction of its JSON, and one far larger
    than the 4 KB window still round-trips."""
    def buildrun(i: int) -> JSON:
        return {"apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
                "metadata": {"name": f"br-{i:06d}", "namespace": "team-a",
                             "uid": f"{i:08d}-8d2c-4b1e-9f3a-1c2d3e4f5a6b",
                             "labels": {"build.shipwright.io/name": "app"}},
                "status": {"conditions": [{"type": "Succeeded", "status": "True",
                                           "reason": "Succeeded", "message": "done"}],
                           "output": {"digest": "sha256:" + f"{i:064x}"}}}
    packer = Packer()
    packer.pack(buildrun(0))
    second = buildrun(1)
    assert len(packer.pack(second)) < len(orjson.dumps(second)) / 4
    huge = {"metadata": {"name": "big"}, "data": [f"line {i} " * 7 for i in range(2000)]}
    assert packer.unpack(packer.pack(huge)) == huge

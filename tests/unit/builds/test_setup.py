"""The Build controller's event filter, Shipwright's predicate (its build controller.go)."""

from __future__ import annotations

from controller.builds.setup import spec_changed


def build(generation: int, **meta: object) -> dict[str, object]:
    return {"metadata": {"name": "b", "namespace": "ns", "generation": generation, **meta}}


def test_new_builds_and_spec_changes_are_reconciled() -> None:
    assert spec_changed("ADDED", build(1), None)
    assert spec_changed("MODIFIED", build(2), build(1))


def test_status_label_and_resync_updates_are_not() -> None:
    assert not spec_changed("MODIFIED", build(1, labels={"a": "b"}), build(1))
    assert not spec_changed("MODIFIED", build(1), build(1))


def test_deletions_are_not() -> None:
    assert not spec_changed("DELETED", build(1), build(1))

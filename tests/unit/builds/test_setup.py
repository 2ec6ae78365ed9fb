"""The Build controller's event filter, Shipwright's predicate (its build controller.go)."""

from __future__ import annotations

from controller.builds.setup import setup, spec_changed
from controller.runtime.informers import InformerFactory, identity_only
from controller.runtime.kube import SECRETS
from controller.settings import Settings
from tests.fakekube import FakeKube


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


def test_the_secret_cache_keeps_each_secrets_name_only() -> None:
    """Issue 32 part 10: a Secret informer cannot be narrowed by label (a Build names any
    Secret), so it keeps what its handler reads, the Secret's key, and nothing else."""
    informers = InformerFactory(None, "ns", None)  # type: ignore[arg-type]
    setup(FakeKube(), Settings(), informers)  # type: ignore[arg-type]  # never called
    secrets = informers.get(SECRETS)
    assert secrets.metadata_only and secrets.label_selector is None
    assert secrets.transform is identity_only
    meta = {"name": "push", "namespace": "ns", "resourceVersion": "7", "uid": "u",
            "labels": {"team": "a"}, "annotations": {"note": "x" * 500},
            "ownerReferences": [{"kind": "SealedSecret", "name": "push"}]}
    assert identity_only({"kind": "PartialObjectMetadata", "metadata": meta}) == {
        "metadata": {"name": "push", "namespace": "ns", "resourceVersion": "7"}}

"""controller/commands/migrate.py's pure parts: which CRDs need the storage migration and
which cannot have it yet (tests/cluster/test_storage_versions.py runs it on an API server)."""

from __future__ import annotations

from typing import Any

from controller import cli
from controller.commands.migrate import CHUNK_SIZE, blocker, stale_versions

JSON = dict[str, Any]


def crd(stored: list[str], versions: dict[str, tuple[bool, bool]]) -> JSON:
    """`versions`: name -> (served, storage)."""
    return {"metadata": {"name": "builds.shipwright.io"},
            "spec": {"versions": [{"name": n, "served": served, "storage": storage}
                                  for n, (served, storage) in versions.items()]},
            "status": {"storedVersions": stored}}


SHIPWRIGHT_0_20 = {"v1alpha1": (True, False), "v1beta1": (True, True)}


def test_only_versions_besides_v1beta1_are_stale() -> None:
    assert stale_versions(crd(["v1alpha1", "v1beta1"], SHIPWRIGHT_0_20)) == ["v1alpha1"]
    assert stale_versions(crd(["v1beta1"], SHIPWRIGHT_0_20)) == []
    assert stale_versions({"metadata": {"name": "x"}}) == []


def test_shipwright_0_20s_crds_can_be_migrated() -> None:
    assert blocker(crd(["v1alpha1", "v1beta1"], SHIPWRIGHT_0_20)) is None


def test_a_crd_that_still_stores_v1alpha1_cannot_be() -> None:
    line = blocker(crd(["v1alpha1"], {"v1alpha1": (True, True), "v1beta1": (True, False)}))
    assert line == ("CRD builds.shipwright.io stores v1alpha1, not v1beta1: a rewrite would "
                    "store it again; install Shipwright v0.12 or later first")


def test_a_crd_without_v1beta1_cannot_be() -> None:
    line = blocker(crd(["v1alpha1"], {"v1alpha1": (True, True)}))
    assert line == ("CRD builds.shipwright.io does not serve v1beta1 (it serves v1alpha1): "
                    "install Shipwright v0.12 or later (its CRDs and webhook) first")


def test_the_subcommand_takes_the_connection_flags_before_or_after_it() -> None:
    before = cli.parser().parse_args(["--kubeconfig", "k", "migrate-storage"])
    after = cli.parser().parse_args(["migrate-storage", "--kubeconfig", "k", "--chunk-size", "7"])
    assert (before.command, before.kubeconfig, getattr(before, "chunk_size", CHUNK_SIZE)) == (
        "migrate-storage", "k", CHUNK_SIZE)
    assert (after.kubeconfig, after.chunk_size) == ("k", 7)

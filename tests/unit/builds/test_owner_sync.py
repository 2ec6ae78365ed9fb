"""The Build controller's owner sync (retention.atBuildDeletion) reads only the BuildRuns
whose owners must change, found by two indexes, and writes exactly what reading every
BuildRun of the Build would (issue 34: that read held the event loop at each restart).
On the in-memory API server (tests/fakekube.py), with the BuildRun cache as the informer
keeps it (BUILDRUN_INDEXERS, a finished BuildRun frozen)."""

from __future__ import annotations

import copy

import pytest

from controller.buildrun.caches import finished_buildrun
from controller.builds.reconciler import BuildReconciler
from controller.builds.validation import owner_references
from controller.runtime.kube import JSON
from controller.runtime.store import Store
from controller.shipwright.indexes import BUILDRUN_INDEXERS
from controller.shipwright.resources import BUILDRUNS, BUILDS
from tests.fakekube import FakeKube


def buildrun(kube: FakeKube, name: str, build: str, owners: list[str], done: bool) -> JSON:
    return kube.add(BUILDRUNS, {
        "metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "shipwright.io/v1beta1", "kind": kind, "name": owner, "uid": "u"}
            for kind, owner in (o.split("/") for o in owners)]},
        "spec": {"build": {"name": build}},
        "status": {"completionTime": "2026-12-04T00:00:00Z"} if done else {}})


@pytest.mark.parametrize("at_deletion", [True, False])
async def test_only_the_buildruns_whose_owners_change_are_read_and_written(
        at_deletion: bool) -> None:
    kube = FakeKube()
    build = kube.add(BUILDS, {"apiVersion": "shipwright.io/v1beta1", "kind": "Build",
                              "metadata": {"name": "app"},
                              "spec": {"retention": {"atBuildDeletion": at_deletion}}})
    runs = [buildrun(kube, "plain", "app", [], done=True),
            buildrun(kube, "owned", "app", ["Build/app"], done=True),
            buildrun(kube, "other-owner", "app", ["Job/x"], done=False),
            buildrun(kube, "owned-named-other", "other", ["Build/app"], done=True)]
    cache = Store(BUILDRUN_INDEXERS, finished_buildrun)
    for run in runs:
        cache.upsert(copy.deepcopy(run))
    # What the owner sync wrote before it used the indexes: every BuildRun naming the
    # Build, read, and patched where owner_references asks for a change.
    expected = sorted(run["metadata"]["name"] for run in runs
                      if run["spec"]["build"]["name"] == "app"
                      and owner_references(build, run) is not None)
    read: list[str] = []
    get = cache.get

    def counting_get(key: str) -> JSON | None:
        read.append(key)
        return get(key)

    cache.get = counting_get  # type: ignore[method-assign]
    reconciler = BuildReconciler(kube, Store(), Store(), cache)  # type: ignore[arg-type]
    await reconciler._sync_owners(build, "ns/app")
    assert sorted(name for _, _, name, _ in kube.writes()) == expected
    assert sorted(k.split("/")[1] for k in read) == expected
    assert expected == (["other-owner", "plain"] if at_deletion else ["owned"])

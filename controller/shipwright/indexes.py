"""The indexes the informers keep on BuildRuns, read by every controller that finds a
Build's BuildRuns (the Build, BuildRun and build-limit controllers)."""

from __future__ import annotations

from controller.runtime.kube import JSON
from controller.runtime.shapes import at, objects, text
from controller.runtime.store import Indexer
from controller.shipwright.recorded_executor import recorded_executor

# Store.by_index(BY_BUILD, "namespace/build") -> the BuildRuns naming that Build.
BY_BUILD = "build"


def build_names(buildrun: JSON) -> list[str]:
    """Index function: the key of the Build a BuildRun names, if it names one."""
    name = text(at(buildrun, "spec", "build", "name"))
    return [f"{buildrun['metadata']['namespace']}/{name}"] if name else []


# Store.by_index(BY_BUILD_OWNER, "namespace/build") -> the BuildRuns with that Build among
# their ownerReferences (retention.atBuildDeletion: the Build controller's owner sync).
BY_BUILD_OWNER = "build-owner"


def build_owners(buildrun: JSON) -> list[str]:
    """Index function: the key of each Build among a BuildRun's ownerReferences (by kind
    and name, as the owner sync compares them)."""
    namespace = buildrun["metadata"]["namespace"]
    return [f"{namespace}/{ref.get('name')}"
            for ref in objects(buildrun["metadata"].get("ownerReferences"))
            if ref.get("kind") == "Build"]


# Store.index_keys(ACTIVE, ACTIVE) -> the BuildRuns running now: their status names a run
# and has no completionTime (the BuildRun controller's Running phase). Shipwright #2187's
# build_buildruns_active counts them (metrics.py) without decoding a finished one.
ACTIVE = "active"


def active(buildrun: JSON) -> list[str]:
    """Index function: [ACTIVE] for a BuildRun running now, else none."""
    status = buildrun.get("status")
    if recorded_executor(status) is None or at(status, "completionTime"):
        return []
    return [ACTIVE]


BUILDRUN_INDEXERS: dict[str, Indexer] = {BY_BUILD: build_names, BY_BUILD_OWNER: build_owners,
                                         ACTIVE: active}

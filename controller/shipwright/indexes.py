"""The index the informers keep on BuildRuns, read by every controller that finds a
Build's BuildRuns (the Build, BuildRun and build-limit controllers)."""

from __future__ import annotations

from controller.runtime.kube import JSON
from controller.runtime.store import Indexer

# Store.by_index(BY_BUILD, "namespace/build") -> the BuildRuns naming that Build.
BY_BUILD = "build"


def build_names(buildrun: JSON) -> list[str]:
    """Index function: the key of the Build a BuildRun names, if it names one."""
    name = ((buildrun.get("spec") or {}).get("build") or {}).get("name")
    return [f"{buildrun['metadata']['namespace']}/{name}"] if name else []


BUILDRUN_INDEXERS: dict[str, Indexer] = {BY_BUILD: build_names}

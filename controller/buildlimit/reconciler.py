"""The build-limit cleanup reconciler: keyed by Build, deletes the BuildRuns its
retention limits no longer keep.

Reads only the informer caches (the Build, and its BuildRuns through the BuildRun
informer's "build" index), so a finish costs no list call. Every deletion is
preconditioned on the uid and resourceVersion the decision was made on: a BuildRun
recreated under the same name, or changed since, is never deleted by a stale
verdict; the 409 sends the Build back to the queue with backoff, to decide again
on a fresh cache.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from controller.buildlimit.limits import Kind, Limits, limits_of, victims
from controller.runtime.controller import DONE, Result
from controller.runtime.errors import RetryableError, is_not_found
from controller.runtime.events import EventRecorder
from controller.runtime.kube import JSON, ApiError, Kube
from controller.runtime.store import Store
from controller.shipwright.indexes import BY_BUILD
from controller.shipwright.resources import BUILDRUNS

log = logging.getLogger(__name__)

# The Event on a Build whose limit deleted BuildRuns (Shipwright records none).
REASON_DELETED = "BuildRunsDeletedByLimit"
# Names quoted in one Event message, at most.
_NAMED_MAX = 10

DELETED_BY_LIMIT = Counter(
    "buildrun_deleted_by_limit_total",
    "BuildRuns deleted because their Build's retention succeededLimit or failedLimit "
    "was exceeded (buildrun_deleted_total counts the TTL deletions)",
    ["limit"],
)
for _kind in ("succeeded", "failed"):
    DELETED_BY_LIMIT.labels(_kind)


class BuildLimitReconciler:
    def __init__(self, kube: Kube, builds: Store, buildruns: Store,
                 recorder: EventRecorder) -> None:
        self.kube = kube
        self.builds = builds
        self.buildruns = buildruns  # indexed by "build": namespace/name of spec.build.name
        self.recorder = recorder

    async def reconcile(self, key: str) -> Result:
        build = self.builds.get(key)
        if build is None:
            return DONE
        limits = limits_of(build)
        if not limits:
            return DONE
        deleted: dict[Kind, list[str]] = {"succeeded": [], "failed": []}
        for kind, buildrun in victims(limits, self.buildruns.by_index(BY_BUILD, key)):
            meta = buildrun["metadata"]
            try:
                await self.kube.delete(BUILDRUNS, meta["namespace"], meta["name"],
                                       preconditions={"uid": meta["uid"],
                                                      "resourceVersion": meta["resourceVersion"]})
            except ApiError as exc:
                if not is_not_found(exc):
                    self._report(build, limits, deleted)
                    raise
                continue  # already gone: someone else's deletion, not counted
            DELETED_BY_LIMIT.labels(kind).inc()
            deleted[kind].append(meta["name"])
        self._report(build, limits, deleted)
        return DONE

    async def give_up(self, key: str, error: RetryableError) -> Result:
        # Nothing to mark as failed: the next finish or Build change tries again.
        log.warning("build-limit cleanup gave up for now", extra={"key": key,
                                                                  "error": str(error)})
        return DONE

    def _report(self, build: JSON, limits: Limits, deleted: dict[Kind, list[str]]) -> None:
        for kind, names in deleted.items():
            if not names:
                continue
            listed = ", ".join(names[:_NAMED_MAX])
            more = f" and {len(names) - _NAMED_MAX} more" if len(names) > _NAMED_MAX else ""
            message = (f"deleted {len(names)} {kind} BuildRun(s) beyond {kind}Limit "
                       f"{limits.of(kind)}: {listed}{more}")
            self.recorder.record(build, "Normal", REASON_DELETED, message)
            meta = build["metadata"]
            log.info("deleted BuildRuns beyond the Build's retention limit",
                     extra={"build": f"{meta['namespace']}/{meta['name']}", "limit": kind,
                            "buildruns": names})

"""What the build-limit cleanup controller runs: its queue and reconciler, fed by the
process's Build and BuildRun informers (which the other controllers read too).

A Build is queued when it is seen with a limit (so the limits apply at start-up and
when a limit is lowered) and when one of its BuildRuns is seen finished while it
has a limit. The queue deduplicates: a burst of finishes of one Build is one
reconcile.
"""

from __future__ import annotations

from controller.buildlimit.limits import finished_kind, limits_of
from controller.buildlimit.reconciler import BuildLimitReconciler
from controller.runtime.controller import Controller, controller_queue, event_priority
from controller.runtime.events import EventRecorder
from controller.runtime.informers import EventType, InformerFactory
from controller.runtime.kube import JSON, Kube, key_of
from controller.settings import Settings
from controller.shipwright.indexes import BUILDRUN_INDEXERS, build_names
from controller.shipwright.resources import BUILDRUNS, BUILDS

NAME = "build-limit-cleanup"
# Deletions are a few requests per finish at most; two workers keep one slow Build
# from holding up the others.
WORKERS = 2


def setup(kube: Kube, settings: Settings, recorder: EventRecorder,
          informers: InformerFactory) -> Controller:
    queue = controller_queue(NAME, settings.queue)
    build_informer = informers.informer(BUILDS)
    buildrun_informer = informers.informer(BUILDRUNS, indexers=BUILDRUN_INDEXERS)
    builds = build_informer.store
    reconciler = BuildLimitReconciler(kube, builds, buildrun_informer.store, recorder)
    controller = Controller(NAME, reconciler, queue, workers=WORKERS, budget=settings.budget,
                            reconcile_timeout=settings.reconcile_timeout)

    def on_build(event: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        if limits_of(obj):
            controller.enqueue(key_of(obj), event_priority(obj, old, initial))

    def on_buildrun(_: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        if finished_kind(obj) is None:
            return
        for key in build_names(obj):
            build = builds.get(key)
            if build is not None and limits_of(build):
                controller.enqueue(key, event_priority(obj, old, initial))

    build_informer.add_handler(on_build)
    buildrun_informer.add_handler(on_buildrun)
    return controller

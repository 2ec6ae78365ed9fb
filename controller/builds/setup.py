"""What the Build controller runs: its queue, reconciler and event filter, wired into one
Controller on informers the process shares with the BuildRun controller.

Like Shipwright's build-controller (pkg/reconciler/build/controller.go): a Build is
validated when it appears and whenever its spec changes (metadata.generation); its
own status writes, label edits and resyncs do not wake it, and a deletion needs
nothing. The process-level runner (`controller.app`) starts the controller; nothing
here starts a task.
"""

from __future__ import annotations

from controller.builds.reconciler import BuildReconciler
from controller.runtime.informers import EventType, InformerFactory
from controller.runtime.kube import JSON, Kube, key_of
from controller.runtime.reconcile import Controller, controller_queue
from controller.settings import Settings
from controller.shipwright.indexes import BUILDRUN_INDEXERS
from controller.shipwright.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES

NAME = "build"


def spec_changed(kind: EventType, obj: JSON, old: JSON | None) -> bool:
    """Shipwright's predicate: every new Build, an update only when its generation moved
    (the spec changed), never a deletion."""
    if kind == "DELETED":
        return False
    if kind == "ADDED" or old is None:
        return True
    return bool(obj["metadata"].get("generation") != old["metadata"].get("generation"))


def setup(kube: Kube, settings: Settings, informers: InformerFactory) -> Controller:
    """The Build controller, on the process's Build, BuildStrategy and BuildRun informers
    (the BuildRun controller reads them too: one watch per kind)."""
    builds = informers.informer(BUILDS)
    strategies = informers.informer(BUILDSTRATEGIES)
    buildruns = informers.informer(BUILDRUNS, indexers=BUILDRUN_INDEXERS)
    queue = controller_queue(NAME, settings.queue)
    controller = Controller(
        NAME, BuildReconciler(kube, builds.store, strategies.store, buildruns.store), queue,
        workers=settings.workers,
        budget=settings.budget,
        reconcile_timeout=settings.reconcile_timeout,
    )

    def on_build(kind: EventType, obj: JSON, old: JSON | None) -> None:
        if spec_changed(kind, obj, old):
            controller.enqueue(key_of(obj))

    builds.add_handler(on_build)
    return controller

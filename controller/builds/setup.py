"""What the Build controller runs: its queue, reconciler and event filter, wired into one
`BuildController` on informers the process shares with the BuildRun controller.

Like Shipwright's build-controller (pkg/reconciler/build/controller.go): a Build is
validated when it appears and whenever its spec changes (metadata.generation); its
own status writes, label edits and resyncs do not wake it, and a deletion needs
nothing. The process-level runner (`controller.app`) starts the controller; nothing
here starts a task.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.builds.reconciler import BuildReconciler
from controller.runtime.informers import EventType, Informer
from controller.runtime.kube import JSON, Kube, key_of
from controller.runtime.reconcile import Controller, controller_queue
from controller.settings import Settings

NAME = "build"


def spec_changed(kind: EventType, obj: JSON, old: JSON | None) -> bool:
    """Shipwright's predicate: every new Build, an update only when its generation moved
    (the spec changed), never a deletion."""
    if kind == "DELETED":
        return False
    if kind == "ADDED" or old is None:
        return True
    return bool(obj["metadata"].get("generation") != old["metadata"].get("generation"))


@dataclass
class BuildController:
    """The Build controller's Controller; its informers belong to whoever passed them."""

    controller: Controller


def setup(kube: Kube, settings: Settings, builds: Informer, strategies: Informer,
          buildruns: Informer) -> BuildController:
    """`builds`, `strategies` and `buildruns` (indexed by "build") are the process's
    shared informers (the BuildRun controller's): one watch per kind, whatever number
    of controllers reads it."""
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
    return BuildController(controller)


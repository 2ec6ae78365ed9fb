"""What the Build controller runs: its queue, reconciler and event filter, wired into one
Controller on informers the process shares with the BuildRun controller.

Like Shipwright's build-controller (pkg/reconciler/build/controller.go): a Build is
validated when it appears and whenever its spec changes (metadata.generation); its
own status writes, label edits and resyncs do not wake it, and a deletion needs
nothing. A Secret created or deleted validates again the Builds of its namespace that
name it (pushSecret or the source's Secret), through a metadata-only Secret informer:
the process never receives a Secret's data. The process-level runner
(`controller.app`) starts the controller; nothing here starts a task.
"""

from __future__ import annotations

from controller.builds.reconciler import BuildReconciler
from controller.builds.validation import secret_refs
from controller.runtime.controller import Controller, controller_queue, event_priority
from controller.runtime.informers import EventType, InformerFactory, identity_only
from controller.runtime.kube import JSON, SECRETS, Kube, key_of
from controller.runtime.store import Indexer
from controller.settings import Settings
from controller.shipwright import field_managers
from controller.shipwright.forbidden_env import ForbiddenEnvNames
from controller.shipwright.indexes import BUILDRUN_INDEXERS
from controller.shipwright.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES

NAME = "build"

# Store.by_index(BY_SECRET, "namespace/secret") -> the Builds naming that Secret.
BY_SECRET = "secret"


def referenced_secrets(build: JSON) -> list[str]:
    """Index function: "namespace/name" of each Secret the Build names, the ones its
    validation looks up (Shipwright's map function: GetSourceCredentials, pushSecret)."""
    namespace = build["metadata"]["namespace"]
    return [f"{namespace}/{name}" for name in secret_refs(build)]


BUILD_INDEXERS: dict[str, Indexer] = {BY_SECRET: referenced_secrets}


def secret_appeared_or_vanished(kind: EventType) -> bool:
    """Which Secret events can change a verdict: validation asks only whether a Secret
    exists, so a creation or a deletion. Shipwright's Secret watch has no predicate and
    also maps updates (data, labels) to its Builds; they find the same verdict."""
    return kind != "MODIFIED"


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
    (the BuildRun controller reads them too: one watch per kind) and a metadata-only
    Secret informer."""
    builds = informers.informer(BUILDS, indexers=BUILD_INDEXERS)
    # Only their comings and goings are read (on_secret), never a field: the cache keeps
    # each Secret's name. No label selector can narrow it: a Build names any Secret of
    # its namespace, labelled as its owner chose (Shipwright caches every Secret whole).
    secrets = informers.informer(SECRETS, metadata_only=True, transform=identity_only)
    strategies = informers.informer(BUILDSTRATEGIES)
    buildruns = informers.informer(BUILDRUNS, indexers=BUILDRUN_INDEXERS)
    queue = controller_queue(NAME, settings.queue)
    controller = Controller(
        NAME, BuildReconciler(kube.with_field_manager(field_managers.BUILD_CONTROLLER),
                              builds.store, strategies.store, buildruns.store,
                              # Shipwright main's blocklist, read once at start (none unset).
                              ForbiddenEnvNames.from_env()), queue,
        workers=settings.workers,
        budget=settings.budget,
        reconcile_timeout=settings.reconcile_timeout,
    )

    def on_build(kind: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        if spec_changed(kind, obj, old):
            controller.enqueue(key_of(obj), event_priority(obj, old, initial))

    def on_secret(kind: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        if secret_appeared_or_vanished(kind):
            for build in builds.store.by_index(BY_SECRET, key_of(obj)):
                controller.enqueue(key_of(build), event_priority(obj, old, initial))

    builds.add_handler(on_build)
    secrets.add_handler(on_secret)
    return controller

"""What the BuildRun controller runs: the informers it reads, the event-to-key mappers,
its queue, reconciler and metric hooks, wired into one Controller.

The process-level runner (`controller.app`) starts whatever this returns; nothing
here starts a task or handles a signal.
"""

from __future__ import annotations

from controller.buildrun import metrics as buildrun_metrics
from controller.buildrun.caches import Caches
from controller.buildrun.config import ShipwrightConfig
from controller.buildrun.reconciler import BuildRunReconciler
from controller.runtime.errors import ERROR_CLASSES, RetryableError
from controller.runtime.events import EventRecorder
from controller.runtime.informers import EventType, Informer, InformerFactory
from controller.runtime.kube import JSON, SERVICEACCOUNTS, Kube, key_of
from controller.runtime.reconcile import Controller, controller_queue
from controller.settings import Settings
from controller.shipwright.indexes import BUILDRUN_INDEXERS, BY_BUILD
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    TASKRUNS,
)

NAME = "buildrun"


def owner_buildrun(obj: JSON) -> str | None:
    """The BuildRun key a TaskRun (or generated ServiceAccount) belongs to: its controller
    ownerReference, else its label."""
    meta = obj["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "BuildRun" and ref.get("controller"):
            return f"{meta['namespace']}/{ref['name']}"
    name = (meta.get("labels") or {}).get(LABEL_BUILDRUN)
    return f"{meta['namespace']}/{name}" if name else None


# What the controller reads of a cached TaskRun (reconciler.py, status.py, metrics.py):
# its metadata, these fields of its spec (cancel, timeout message) and its status but for
# the two copies Tekton keeps there. A reader of more must add it here.
TASKRUN_SPEC_READ = ("status", "statusMessage", "timeout")
TASKRUN_STATUS_UNREAD = ("taskSpec", "provenance")


def slim_taskrun(taskrun: JSON) -> JSON:
    """The TaskRun informer's transform: drops, in place, the spec's task (the steps,
    parameters and volumes we generated: about 4 KB of the 4.3 KB a parity TaskRun is
    as JSON), Tekton's copy of it in status.taskSpec and its status.provenance. Nothing
    reads them from the cache; an object read with a GET stays whole."""
    spec = taskrun.get("spec")
    if isinstance(spec, dict):
        taskrun["spec"] = {k: spec[k] for k in TASKRUN_SPEC_READ if k in spec}
    status = taskrun.get("status")
    if isinstance(status, dict):
        for key in TASKRUN_STATUS_UNREAD:
            status.pop(key, None)
    return taskrun


def setup(kube: Kube, settings: Settings, recorder: EventRecorder,
          informers: InformerFactory) -> Controller:
    """The BuildRun controller, on the process's informers: it asks `informers` for the
    six kinds it reads (the TaskRuns' transform, slim_taskrun, is its own)."""
    buildruns = informers.informer(BUILDRUNS, indexers=BUILDRUN_INDEXERS)
    builds = informers.informer(BUILDS)
    # Read when a BuildRun starts; a BuildRun never waits on a strategy, so no handler.
    strategies = informers.informer(BUILDSTRATEGIES)
    # Cluster-scoped: watched whole even with --namespace.
    cluster_strategies = informers.informer(CLUSTERBUILDSTRATEGIES)
    taskruns = informers.informer(TASKRUNS, transform=slim_taskrun)
    # Which ServiceAccount a BuildRun runs as, and whether its generated one is left.
    service_accounts = informers.informer(SERVICEACCOUNTS)
    queue = controller_queue(NAME, settings.queue)
    reconciler = BuildRunReconciler(
        kube,
        Caches(buildruns=buildruns.store, taskruns=taskruns.store, builds=builds.store,
               strategies=strategies.store, cluster_strategies=cluster_strategies.store,
               service_accounts=service_accounts.store),
        recorder,
        taskrun_config=ShipwrightConfig.from_env(),
    )
    controller = Controller(
        NAME, reconciler, queue,
        workers=settings.workers,
        budget=settings.budget,
        reconcile_timeout=settings.reconcile_timeout,
        on_retry=_count_retry,
    )
    _zero_retry_series()
    _wire(controller, buildruns, builds, taskruns, service_accounts)
    return controller


def _wire(controller: Controller, buildruns: Informer, builds: Informer,
          taskruns: Informer, service_accounts: Informer) -> None:
    enqueue = controller.enqueue

    def on_buildrun(_: EventType, obj: JSON, __: JSON | None) -> None:
        enqueue(key_of(obj))

    def on_owned(_: EventType, obj: JSON, __: JSON | None) -> None:
        owner = owner_buildrun(obj)
        if owner:
            enqueue(owner)

    def on_build(_: EventType, obj: JSON, __: JSON | None) -> None:
        for buildrun in buildruns.store.by_index(BY_BUILD, key_of(obj)):
            enqueue(key_of(buildrun))

    buildruns.add_handler(on_buildrun)
    taskruns.add_handler(on_owned)
    # A generated ServiceAccount's arrival in the cache may come after its BuildRun is
    # done: the BuildRun is looked at again then (state table row 3 deletes it).
    service_accounts.add_handler(on_owned)
    builds.add_handler(on_build)


def _zero_retry_series() -> None:
    """The error classes are a closed set: give each a zero sample up front."""
    for error_class in ERROR_CLASSES:
        buildrun_metrics.RETRIES.labels(error_class)


def _count_retry(_: str, error: RetryableError) -> None:
    buildrun_metrics.RETRIES.labels(error.error_class).inc()

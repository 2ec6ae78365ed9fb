"""What the BuildRun controller runs: the informers it reads, the event-to-key mappers,
its queue, reconciler and metric hooks, wired into one Controller.

The process-level runner (`controller.app`) starts whatever this returns; nothing
here starts a task or handles a signal.
"""

from __future__ import annotations

from controller.buildrun import metrics as buildrun_metrics
from controller.buildrun.buildruns import phase_of
from controller.buildrun.caches import EXECUTOR_INDEXERS, Caches, owner_buildrun
from controller.buildrun.reconciler import BuildRunReconciler
from controller.buildrun.resources.config import PIPELINERUN_EXECUTOR, ShipwrightConfig
from controller.buildrun.states import Phase
from controller.runtime.controller import Controller, controller_queue
from controller.runtime.errors import ERROR_CLASSES, RetryableError
from controller.runtime.events import EventRecorder
from controller.runtime.informers import EventType, Informer, InformerFactory
from controller.runtime.kube import JSON, SERVICEACCOUNTS, Kube, key_of
from controller.runtime.store import Store
from controller.settings import Settings
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.indexes import BUILDRUN_INDEXERS, BY_BUILD
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    PIPELINERUNS,
    TASKRUNS,
)

NAME = "buildrun"


def buildrun_wakes(kind: EventType, obj: JSON, old: JSON | None) -> bool:
    """Which BuildRun events queue the BuildRun: Shipwright's predBuildRun, widened where
    this one controller does what Shipwright splits across two.

    - ADDED (the first list, a relist, a creation): always. Shipwright passes only a
      BuildRun without executor and completionTime, leaving the rest to its TaskRun
      events and its TTL controller; here the same reconcile handles a finished
      BuildRun's retention TTL and generated ServiceAccount (rows 2-4), so every
      BuildRun is looked at once at start.
    - MODIFIED: a spec change (generation; a cancel is the only one the CRD admits), a
      change of phase (taskRunName or completionTime newly set, by whoever) and a
      resync (the same resourceVersion). A phase change is the one write of ours whose
      event is needed: the next look must see the new phase (a started BuildRun whose
      adopted TaskRun had finished already; a finished one's rows 2-4), and it is the
      last write of the try that makes it, so it never brings a failing key back early.
      Not our other label and status writes: each would queue a failing key again at
      once, around its backoff, and spend --max-retries faster than the backoff implies
      (the soak's three ReconcilerRetriesExhausted runs before this filter,
      RELIABILITY.md).
    - DELETED: never; its TaskRun goes with it (ownerReference).
    """
    if kind == "DELETED":
        return False
    if kind == "ADDED" or old is None:
        return True
    meta, old_meta = obj["metadata"], old["metadata"]
    return bool(
        meta.get("resourceVersion") == old_meta.get("resourceVersion")
        or meta.get("generation") != old_meta.get("generation")
        or phase_of(obj) is not phase_of(old)
    )


def taskrun_wakes(kind: EventType, obj: JSON, old: JSON | None) -> bool:
    """Which TaskRun (and PipelineRun) events queue its BuildRun: Shipwright's predTaskRun
    (its predPipelineRun is the same), plus resyncs.
    Every creation; a deletion before the TaskRun completed (row 13: TaskRunIsMissing);
    an update that starts it, gives it a Succeeded condition, fails it, or changes the
    condition's status, reason or message. Not our own cancel patch, nor Tekton's
    other status writes (steps, results as they come), which change nothing we read."""
    if kind == "DELETED":
        return not _completion(obj)
    if kind == "ADDED" or old is None:
        return True
    if obj["metadata"].get("resourceVersion") == old["metadata"].get("resourceVersion"):
        return True
    status, old_status = obj.get("status") or {}, old.get("status") or {}
    if status.get("startTime") and not old_status.get("startTime"):
        return True
    cond, old_cond = succeeded_condition(status), succeeded_condition(old_status)
    if cond is None:
        return False
    if old_cond is None or cond.get("status") == "False":
        return True
    return any(cond.get(k) != old_cond.get(k) for k in ("status", "reason", "message"))


def _completion(obj: JSON) -> object:
    return (obj.get("status") or {}).get("completionTime")


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
    return _slim(taskrun, TASKRUN_SPEC_READ, TASKRUN_STATUS_UNREAD)


# What the controller reads of a cached PipelineRun: its metadata, these fields of its spec
# (cancel, timeout message) and its status but for Tekton's copy of the pipeline and the
# provenance. Its TaskRuns are read from the TaskRun informer.
PIPELINERUN_SPEC_READ = ("status", "timeouts")
PIPELINERUN_STATUS_UNREAD = ("pipelineSpec", "provenance")


def slim_pipelinerun(pipelinerun: JSON) -> JSON:
    """The PipelineRun informer's transform, as slim_taskrun: drops, in place, the
    generated pipeline (spec.pipelineSpec, every task's steps), Tekton's copy of it in
    status.pipelineSpec and its provenance."""
    return _slim(pipelinerun, PIPELINERUN_SPEC_READ, PIPELINERUN_STATUS_UNREAD)


def _slim(obj: JSON, spec_read: tuple[str, ...], status_unread: tuple[str, ...]) -> JSON:
    """Keeps only `spec_read` of the spec and drops `status_unread` from the status, in
    place (an informer's transform)."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        obj["spec"] = {k: spec[k] for k in spec_read if k in spec}
    status = obj.get("status")
    if isinstance(status, dict):
        for key in status_unread:
            status.pop(key, None)
    return obj


def setup(kube: Kube, settings: Settings, recorder: EventRecorder,
          informers: InformerFactory) -> Controller:
    """The BuildRun controller, on the process's informers: it asks `informers` for the
    six kinds it reads (the TaskRuns' transform, slim_taskrun, is its own), and with
    BUILDRUN_EXECUTOR=PipelineRun a seventh, PipelineRuns (slim_pipelinerun): their
    TaskRuns are read from the TaskRun informer, whose events wake the BuildRun too
    (Tekton copies the BuildRun label onto them)."""
    config = ShipwrightConfig.from_env()  # a bad BUILDRUN_EXECUTOR stops the start here
    buildruns = informers.informer(BUILDRUNS, indexers=BUILDRUN_INDEXERS)
    builds = informers.informer(BUILDS)
    # Read when a BuildRun starts; a BuildRun never waits on a strategy, so no handler.
    strategies = informers.informer(BUILDSTRATEGIES)
    # Cluster-scoped: watched whole even with --namespace.
    cluster_strategies = informers.informer(CLUSTERBUILDSTRATEGIES)
    taskruns = informers.informer(TASKRUNS, transform=slim_taskrun, indexers=EXECUTOR_INDEXERS)
    # Only when configured: a cluster may have no PipelineRun CRD, and the informer's list
    # would then fail for ever (and /readyz with it).
    pipelineruns = (informers.informer(PIPELINERUNS, transform=slim_pipelinerun,
                                       indexers=EXECUTOR_INDEXERS)
                    if config.executor == PIPELINERUN_EXECUTOR else None)
    # Which ServiceAccount a BuildRun runs as, and whether its generated one is left.
    service_accounts = informers.informer(SERVICEACCOUNTS)
    queue = controller_queue(NAME, settings.queue)
    reconciler = BuildRunReconciler(
        kube,
        Caches(buildruns=buildruns.store, taskruns=taskruns.store, builds=builds.store,
               strategies=strategies.store, cluster_strategies=cluster_strategies.store,
               service_accounts=service_accounts.store,
               pipelineruns=pipelineruns.store if pipelineruns else Store(EXECUTOR_INDEXERS),
               unwatched=frozenset() if pipelineruns else frozenset({PIPELINERUNS})),
        recorder,
        taskrun_config=config,
    )
    controller = Controller(
        NAME, reconciler, queue,
        workers=settings.workers,
        budget=settings.budget,
        reconcile_timeout=settings.reconcile_timeout,
        on_retry=_count_retry,
    )
    _zero_retry_series()
    _wire(controller, buildruns, builds, taskruns, service_accounts, pipelineruns)
    return controller


def _wire(controller: Controller, buildruns: Informer, builds: Informer,
          taskruns: Informer, service_accounts: Informer,
          pipelineruns: Informer | None) -> None:
    enqueue = controller.enqueue

    def on_buildrun(kind: EventType, obj: JSON, old: JSON | None) -> None:
        if buildrun_wakes(kind, obj, old):
            enqueue(key_of(obj))

    def on_owned(_: EventType, obj: JSON, __: JSON | None) -> None:
        owner = owner_buildrun(obj)
        if owner:
            enqueue(owner)

    def on_taskrun(kind: EventType, obj: JSON, old: JSON | None) -> None:
        if taskrun_wakes(kind, obj, old):
            on_owned(kind, obj, old)

    def on_build(_: EventType, obj: JSON, __: JSON | None) -> None:
        # Only a BuildRun not started yet reads its Build (row 9 waits for it to be
        # validated); a started one runs on its snapshot.
        for buildrun in buildruns.store.by_index(BY_BUILD, key_of(obj)):
            if phase_of(buildrun) is Phase.NEW:
                enqueue(key_of(buildrun))

    buildruns.add_handler(on_buildrun)
    taskruns.add_handler(on_taskrun)
    if pipelineruns is not None:
        pipelineruns.add_handler(on_taskrun)
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

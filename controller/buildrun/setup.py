"""What the BuildRun controller runs: the informers it reads, the event-to-key mappers,
its queue, reconciler and metric hooks, wired into one Controller.

The process-level runner (`controller.app`) starts whatever this returns; nothing
here starts a task or handles a signal.
"""

from __future__ import annotations

from controller.buildrun import metrics as buildrun_metrics
from controller.buildrun.annotations import SERIAL_TURN
from controller.buildrun.buildruns import canceled, phase_of
from controller.buildrun.caches import (
    EXECUTOR_INDEXERS,
    NEW_BY_BUILD,
    NEW_BY_BUILD_INDEXERS,
    OWN_RUNS,
    SERIAL_WAITING,
    WAITING,
    WAITING_INDEXERS,
    Caches,
    finished_buildrun,
    owner_buildrun,
    slim_pod,
)
from controller.buildrun.executors import EXECUTORS, TASKRUN
from controller.buildrun.outcomes import run_finished, same_meaning, waiting_words
from controller.buildrun.reconciler import BuildRunReconciler
from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.retries import Policy
from controller.buildrun.serial import RunPolicy, order_key, run_policy, turn_of
from controller.buildrun.snippets import FailureLogs
from controller.buildrun.states import Phase
from controller.runtime.controller import (
    LOW_PRIORITY,
    Controller,
    controller_queue,
    event_priority,
)
from controller.runtime.errors import ERROR_CLASSES, RetryableError, UserError
from controller.runtime.events import EventRecorder
from controller.runtime.informers import EventType, Informer, InformerFactory
from controller.runtime.kube import JSON, PODS, SERVICEACCOUNTS, Kube, key_of
from controller.runtime.shapes import at, mapping, text
from controller.runtime.store import Store
from controller.settings import Settings
from controller.shipwright import field_managers
from controller.shipwright import metrics as shipwright_metrics
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.indexes import BUILDRUN_INDEXERS
from controller.shipwright.labels import LABEL_BUILD
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    PIPELINERUNS,
    TASKRUNS,
)

NAME = "buildrun"

# The order of a BuildRun's work when more is queued than the workers take (issue 42 part
# 3: 50 BuildRuns a second on two cores, where the first-come queue kept a run's end 113 s
# at p50 behind the starts queued before it). First a run's end: its outcome is what a
# user waits for, and it frees a serial Build's turn. Then new work at DEFAULT_PRIORITY (a
# BuildRun created or cancelled, a Build its BuildRun waits for, a serial Build's turn):
# nothing builds until its TaskRun exists. Then a run's progress (Running, why its pod
# waits): it only tells, and the end's write tells it too. Below all, as in
# controller-runtime, what the informers' first list or a resync queued (LOW_PRIORITY).
# Within a priority, first come first served; a key queued twice keeps the higher.
FINISH_PRIORITY = 10
PROGRESS_PRIORITY = -10


def buildrun_wakes(kind: EventType, obj: JSON, old: JSON | None) -> bool:
    """Which BuildRun events call for a look at the BuildRun: Shipwright's predBuildRun,
    widened where this one controller does what Shipwright splits across two. Whether
    the look is a reconcile now, later or none is `BuildRunReconciler.next_look`'s to say
    for a finished BuildRun (`_wire`).

    - ADDED (the first list, a relist, a creation): always. Shipwright passes only a
      BuildRun without executor and completionTime, leaving the rest to its TaskRun
      events and its TTL controller; here one controller also handles a finished
      BuildRun's retention TTL and generated ServiceAccount (rows 1-4), so every
      BuildRun is looked at once when seen: a finished one needing nothing costs no
      reconcile, one with a TTL waits for it in the queue (next_look).
    - MODIFIED: a spec change (generation: the CRD admits a cancel, and a finished
      BuildRun's retention TTLs, which rows 2 and 4 read live), a change of phase
      (taskRunName or completionTime newly set, by whoever) and a resync (the same
      resourceVersion). A phase change is the one write of ours whose event is needed:
      the next look must see the new phase (a started BuildRun whose adopted TaskRun had
      finished already; a finished one's rows 1-4), and it is the last write of the try
      that makes it, so it never brings a failing key back early. Not our other label
      and status writes: each would queue a failing key again at once, around its
      backoff, and spend --max-retries faster than the backoff implies (the soak's three
      ReconcilerRetriesExhausted runs before this filter, RELIABILITY.md).
    - MODIFIED to another uid: always. A relist that finds the BuildRun deleted and
      created again under its name (the watch missed both) hands the namesake over as an
      update of the old one, which may look alike (both new, the same generation).
    - DELETED: never; its TaskRun goes with it (ownerReference).
    """
    if kind == "DELETED":
        return False
    if kind == "ADDED" or old is None:
        return True
    meta, old_meta = obj["metadata"], old["metadata"]
    return bool(
        meta.get("uid") != old_meta.get("uid")
        or meta.get("resourceVersion") == old_meta.get("resourceVersion")
        or meta.get("generation") != old_meta.get("generation")
        or phase_of(obj) is not phase_of(old)
    )


def run_wakes(kind: EventType, obj: JSON, old: JSON | None, initial: bool = False) -> bool:
    """Which TaskRun (and PipelineRun) events queue its BuildRun: Shipwright's predTaskRun
    (its predPipelineRun is the same), plus resyncs.
    Every creation; a deletion before the TaskRun completed (row 16: TaskRunIsMissing);
    an update that starts it, gives it a Succeeded condition, fails it, or changes the
    condition's status, reason or message. Not our own cancel patch, nor Tekton's
    other status writes (steps, results as they come), which change nothing we read.

    A run of the initial list or a resync (no news) only while it still runs: a finished
    one tells its BuildRun nothing the BuildRun's own listing does not (a started
    BuildRun is looked at anyway; a finished one needs its run only while that runs,
    row 1). So a restart queues no reconcile per finished TaskRun, where Shipwright's
    queues one per TaskRun listed (at low priority)."""
    if kind == "DELETED":
        return not _completion(obj)
    if initial or (old is not None and obj["metadata"].get("resourceVersion")
                   == old["metadata"].get("resourceVersion")):
        return not run_finished(obj)
    if kind == "ADDED" or old is None:
        return True
    status, old_status = mapping(obj.get("status")), mapping(old.get("status"))
    if status.get("startTime") and not old_status.get("startTime"):
        return True
    cond, old_cond = succeeded_condition(status), succeeded_condition(old_status)
    if cond is None:
        return False
    if old_cond is None or cond.get("status") == "False":
        return True
    return any(cond.get(k) != old_cond.get(k) for k in ("status", "reason", "message"))


def run_priority(obj: JSON, old: JSON | None, initial: bool, *, ended: bool) -> int:
    """The priority of the BuildRun key queued by an event of its run (TaskRun or
    PipelineRun) or pod: FINISH_PRIORITY if the run (pod) `ended` or went,
    PROGRESS_PRIORITY while it runs, LOW_PRIORITY for no news (`event_priority`)."""
    if event_priority(obj, old, initial) == LOW_PRIORITY:
        return LOW_PRIORITY
    return FINISH_PRIORITY if ended else PROGRESS_PRIORITY


def serial_frees(kind: EventType, obj: JSON, old: JSON | None) -> bool:
    """Whether a BuildRun event may let the next BuildRun of a serial Build start: it was
    deleted, it finished, it was canceled before it started (row 7 finishes it; it no
    longer counts as ahead), or a relist handed a namesake over as an update of the old
    one (another uid)."""
    if kind == "DELETED":
        return True
    if old is None:
        return False
    return (obj["metadata"].get("uid") != old["metadata"].get("uid")
            or (phase_of(obj) is Phase.DONE and phase_of(old) is not Phase.DONE)
            or (canceled(obj) and not canceled(old)))


def turn_moved_only(obj: JSON, old: JSON | None) -> bool:
    """Whether a Build event changed nothing but the holder of its turn (serial.turn_of,
    written by a BuildRun about to start): the Build's other NEW BuildRuns learn nothing
    from it. A resync (the same resourceVersion) is not one."""
    if old is None or obj["metadata"].get("resourceVersion") == old["metadata"].get(
            "resourceVersion"):
        return False

    def rest(build: JSON) -> JSON:
        meta = {k: v for k, v in build["metadata"].items()
                if k not in ("resourceVersion", "managedFields", "annotations")}
        annotations = {k: v for k, v in mapping(build["metadata"].get("annotations")).items()
                       if k != SERIAL_TURN}
        return {**build, "metadata": {**meta, "annotations": annotations}}

    return turn_of(obj) != turn_of(old) and rest(obj) == rest(old)


def _serial_policy(build: JSON | None) -> RunPolicy | None:
    """The Build's serial run policy, None for none (or for a value that is none: its
    BuildRuns fail InvalidRunPolicy on their own reconcile)."""
    try:
        policy = run_policy(build)
    except UserError:
        return None
    return None if policy is RunPolicy.PARALLEL else policy


def pod_wait_changed(pod: JSON, old: JSON | None) -> bool:
    """Whether a run's pod says something new of why it waits (outcomes.waiting_words):
    unschedulable, an image it cannot pull, or no longer, with another meaning than before
    (a back-off's growing duration alone is none: `same_meaning`). Tekton's own status
    write for the same pod change wakes the BuildRun too, but may come before the pod
    cache has the change."""
    words, before = waiting_words(pod), waiting_words(old)
    if words is None or before is None:
        return words != before
    return not same_meaning(words, before)


def _completion(obj: JSON) -> object:
    return at(obj, "status", "completionTime")


def setup(kube: Kube, settings: Settings, recorder: EventRecorder,
          informers: InformerFactory) -> Controller:
    """The BuildRun controller, on the process's informers: it asks `informers` for the
    seven kinds it reads (the TaskRuns trimmed by TASKRUN.slim, the pods by slim_pod, both
    only those labelled with a BuildRun's name), and when the configured executor runs as
    another kind (BUILDRUN_EXECUTOR=PipelineRun) an eighth, that kind, trimmed by its own
    `slim`: a PipelineRun's TaskRuns are read from the TaskRun informer, whose events wake
    the BuildRun too (Tekton copies the BuildRun label onto them). A finished BuildRun or
    run is cached frozen (finished_buildrun, outcomes.run_finished)."""
    # Shipwright's settings, read once, here, at start: a bad BUILDRUN_EXECUTOR (or any
    # other) stops the start.
    config = ShipwrightConfig.from_env()
    executor = EXECUTORS[config.executor]  # resolved once, here
    # Updated whole (status_writes.write_status), frozen once finished.
    buildruns = informers.informer(BUILDRUNS, indexers=BUILDRUN_INDEXERS | NEW_BY_BUILD_INDEXERS
                                   | WAITING_INDEXERS, freeze=finished_buildrun, updated=True)
    buildrun_metrics.WAITING.watch(buildruns.store, WAITING)
    builds = informers.informer(BUILDS)
    # Read when a BuildRun starts; a BuildRun never waits on a strategy, so no handler.
    strategies = informers.informer(BUILDSTRATEGIES)
    # Cluster-scoped: watched whole even with --namespace.
    cluster_strategies = informers.informer(CLUSTERBUILDSTRATEGIES)
    # Only the runs of BuildRuns (OWN_RUNS): other TaskRuns never reach the process.
    runs = {TASKRUNS: informers.informer(TASKRUNS, transform=TASKRUN.slim,
                                         indexers=EXECUTOR_INDEXERS, label_selector=OWN_RUNS,
                                         freeze=run_finished)}
    if executor.resource not in runs:
        # Only when configured: a cluster may have no PipelineRun CRD, and the informer's
        # list would then fail for ever (and /readyz with it).
        runs[executor.resource] = informers.informer(
            executor.resource, transform=executor.slim, indexers=EXECUTOR_INDEXERS,
            label_selector=OWN_RUNS, freeze=run_finished)
    # Which ServiceAccount a BuildRun runs as, and whether its generated one is left.
    service_accounts = informers.informer(SERVICEACCOUNTS)
    # The runs' pods, for Shipwright's ramp-up metrics at a finish: read from this cache,
    # as Shipwright reads them, not with a GET per finish. A pod wakes its BuildRun only on
    # its way out (a cancelled run's: row 14 awaits its end).
    pods = informers.informer(PODS, transform=slim_pod, label_selector=OWN_RUNS)
    queue = controller_queue(NAME, settings.queue)
    caches = Caches(buildruns=buildruns.store, taskruns=runs[TASKRUNS].store,
                    builds=builds.store, strategies=strategies.store,
                    cluster_strategies=cluster_strategies.store,
                    service_accounts=service_accounts.store, pods=pods.store,
                    pipelineruns=(runs[PIPELINERUNS].store if PIPELINERUNS in runs
                                  else Store(EXECUTOR_INDEXERS)),
                    unwatched=frozenset(e.resource for e in EXECUTORS.values()) - runs.keys())
    reconciler = BuildRunReconciler(
        kube.with_field_manager(field_managers.BUILDRUN_CONTROLLER), caches,
        recorder,
        executor=executor,
        config=config,
        timeout_grace=settings.timeout_grace,
        look_again=settings.queue.max_delay,
        retries=Policy(settings.infrastructure_retries, settings.infrastructure_retry_delay),
        pending_timeout=settings.pending_timeout,
        fail_on_owner_conflict=settings.fail_on_owner_conflict,
        failure_logs=(FailureLogs(kube, settings.log_snippet)
                      if settings.log_snippet is not None else None),
    )
    controller = Controller(
        NAME, reconciler, queue,
        workers=settings.workers,
        budget=settings.budget,
        reconcile_timeout=settings.reconcile_timeout,
        on_retry=_count_retry,
    )
    _zero_retry_series()
    # buildrun_serial_waiting, counted from this cache when scraped.
    buildrun_metrics.SERIAL_QUEUES.watch(buildruns.store, SERIAL_WAITING)
    # Shipwright #2187's build_buildruns_active, from this cache while this controller runs.
    shipwright_metrics.count_active(buildruns.store, controller)
    _wire(controller, reconciler, buildruns, builds, list(runs.values()), service_accounts,
          pods)
    return controller


def _wire(controller: Controller, reconciler: BuildRunReconciler, buildruns: Informer,
          builds: Informer, runs: list[Informer], service_accounts: Informer,
          pods: Informer) -> None:
    """Event handlers: each maps an event to the BuildRun it concerns, at the priority
    `event_priority` gives it (after a restart, the initial list's backlog waits behind
    new work, as in controller-runtime)."""
    enqueue = controller.enqueue

    def wake_serial_queue(build: str, obj: JSON, old: JSON | None, initial: bool,
                          *, arrived: bool = False) -> None:
        """A BuildRun or run of a serial Build ended, went or came: the Build's NEW
        BuildRuns look again (the next one starts). One that `arrived` (a new BuildRun)
        concerns only some: under SerialLatestOnly those before it (now superseded), under
        Serial those after it (created in the same second, its name first: it is now just
        ahead of one of them). A Build without the annotation costs one lookup."""
        namespace = obj["metadata"]["namespace"]
        policy = _serial_policy(builds.store.get(f"{namespace}/{build}"))
        if policy is None:
            return
        for key in sorted(buildruns.store.index_keys(NEW_BY_BUILD, f"{namespace}/{build}")):
            if arrived and key != key_of(obj):
                other = buildruns.store.get(key)
                if other is None or (order_key(other) < order_key(obj)) != (
                        policy is RunPolicy.SERIAL_LATEST_ONLY):
                    continue
            enqueue(key, event_priority(obj, old, initial))

    def on_buildrun(kind: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        # Not on the initial list: every NEW BuildRun is looked at then anyway.
        build = text(at(obj, "spec", "build", "name"))
        if build and not initial:
            if serial_frees(kind, obj, old):
                wake_serial_queue(build, obj, old, initial)
            elif kind == "ADDED" and phase_of(obj) is Phase.NEW:
                wake_serial_queue(build, obj, old, initial, arrived=True)
        if not buildrun_wakes(kind, obj, old):
            return
        delay = reconciler.next_look(obj)
        if delay is not None:
            controller.enqueue_after(key_of(obj), delay, event_priority(obj, old, initial))

    def on_owned(_: EventType, obj: JSON, old: JSON | None, initial: bool,
                 priority: int | None = None) -> None:
        owner = owner_buildrun(obj)
        if owner:
            enqueue(owner, event_priority(obj, old, initial) if priority is None else priority)

    def on_run(kind: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        build = text(mapping(obj["metadata"].get("labels")).get(LABEL_BUILD))
        if build and not initial and (kind == "DELETED" or (
                run_finished(obj) and (old is None or not run_finished(old)))):
            # A run of the Build ended or went (one a backstop's verdict left stopping).
            wake_serial_queue(build, obj, old, initial)
        if run_wakes(kind, obj, old, initial):
            on_owned(kind, obj, old, initial, run_priority(
                obj, old, initial, ended=kind == "DELETED" or run_finished(obj)))

    def on_build(_: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        # Only a BuildRun not started yet reads its Build (row 9 waits for it to be
        # validated); a started one runs on its snapshot. A new holder of the Build's turn
        # (serial.py) concerns only itself: it goes first, and may have been told to wait
        # (its turn written by another replica, this one's cache behind).
        keys = sorted(buildruns.store.index_keys(NEW_BY_BUILD, key_of(obj)))
        if turn_moved_only(obj, old):
            held = turn_of(obj)
            holder = f"{obj['metadata']['namespace']}/{held[0]}" if held else ""
            keys = [key for key in keys if key == holder]
        for key in keys:
            enqueue(key, event_priority(obj, old, initial))

    def on_pod(kind: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        # A pod on its way out (a cancelled run's): its end is what a BuildRun awaits
        # (row 14), and once it is gone only its last state tells it. And a pod whose
        # reason to wait changed its meaning (pod_wait_changed): the BuildRun says it.
        if not at(obj, "metadata", "deletionTimestamp"):
            if pod_wait_changed(obj, old):
                on_owned(kind, obj, old, initial, run_priority(obj, old, initial, ended=False))
            return
        if kind == "DELETED":
            reconciler.caches.ended_pods.record(obj)
        on_owned(kind, obj, old, initial, run_priority(obj, old, initial, ended=True))

    buildruns.add_handler(on_buildrun)
    for informer in runs:
        informer.add_handler(on_run)
    pods.add_handler(on_pod)
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

"""The informers' stores the BuildRun reconciler reads, and its one way to read them."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from controller.buildrun.buildruns import phase_of
from controller.buildrun.outcomes import IMAGE_WAITING_REASONS, run_finished
from controller.buildrun.reasons import (
    BUILD_RUN_CANCELED,
    RUNNING,
    SERIAL_RUN_WAITING,
    metric_reason,
)
from controller.buildrun.retries import DISRUPTION_TARGET
from controller.buildrun.states import Phase
from controller.runtime.kube import JSON, PODS, SERVICEACCOUNTS, Kube, Resource, key_of
from controller.runtime.shapes import at, mapping, objects, text
from controller.runtime.store import Indexer, Store
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.indexes import BUILDRUN_INDEXERS, build_names
from controller.shipwright.labels import LABEL_BUILD, LABEL_BUILDRUN
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    PIPELINERUNS,
    TASKRUNS,
)

# How often a BuildRun running as an unwatched kind is looked at (Caches.unwatched).
UNWATCHED_POLL = 10.0


def owner_buildrun(obj: JSON) -> str | None:
    """The BuildRun key a TaskRun, PipelineRun (or generated ServiceAccount) belongs to: its
    controller ownerReference, else its label (which Tekton copies from a PipelineRun to
    its TaskRuns, so a PipelineRun's TaskRuns map to its BuildRun too)."""
    meta = obj["metadata"]
    for ref in objects(meta.get("ownerReferences")):
        if ref.get("kind") == "BuildRun" and ref.get("controller") is True and text(
                ref.get("name")):
            return f"{meta['namespace']}/{ref['name']}"
    name = text(mapping(meta.get("labels")).get(LABEL_BUILDRUN))
    return f"{meta['namespace']}/{name}" if name else None


def _owner_keys(obj: JSON) -> list[str]:
    owner = owner_buildrun(obj)
    return [owner] if owner else []


# The label selector of the TaskRun, PipelineRun and Pod informers: only the objects of a
# BuildRun (Tekton copies a TaskRun's labels onto its pod, a PipelineRun's onto its
# TaskRuns). Shipwright caches TaskRuns and Pods by the same selector since v0.16 (its
# issue 1869), so a cluster's other TaskRuns (CI pipelines) never reach the process.
OWN_RUNS = LABEL_BUILDRUN


def slim_pod(pod: JSON) -> JSON:
    """The Pod informer's transform: what Shipwright's ramp-up metrics read of a run's
    pod (`shipwright.metrics.taskrun_pod_seen`: its creation time and its last init
    container's finish), and what the cache needs (name, namespace, resourceVersion).
    A few hundred bytes, where a whole pod of a build is ten to twenty KB; with its
    BuildRun label, so that its events find their BuildRun (setup.py's on_pod).

    A pod on its way out (deletionTimestamp: Tekton deletes the pod of a run it cancels,
    and its containers run on for the grace period) keeps more while it goes: its
    phase and each container's end (exit code, and the termination
    message that holds its results), so that what it ends as can be told when it is
    gone (`EndedPods`): a build that ends then has pushed its image.

    A pod that cannot start keeps why (`_waiting`: the scheduler's and the kubelet's
    words, which a waiting BuildRun's message shows: outcomes.waiting_words)."""
    meta = pod["metadata"]
    slim: JSON = {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion",
                                                     "creationTimestamp") if k in meta}}
    inits = objects(at(pod, "status", "initContainerStatuses"))
    finished = text(at(inits[-1], "state", "terminated", "finishedAt")) if inits else None
    status: JSON = {}
    if finished:
        status["initContainerStatuses"] = [{"state": {"terminated": {"finishedAt": finished}}}]
    # Kept on the way out too: Tekton deletes the pod of a run it fails or cancels, and a
    # BuildRun that looks then still says why it waited (not Tekton's words again).
    status.update(_waiting(pod))
    owner = text(mapping(meta.get("labels")).get(LABEL_BUILDRUN))
    if owner:
        # Which BuildRun its events wake (owner_buildrun): one on its way out, one whose
        # reason to wait changed (setup.py).
        slim["metadata"]["labels"] = {LABEL_BUILDRUN: owner}
    if meta.get("deletionTimestamp"):
        slim["metadata"]["deletionTimestamp"] = meta["deletionTimestamp"]
        status["phase"] = at(pod, "status", "phase")
        # What tells the infrastructure's end of it from the build's (retries.py): when its
        # deletion was asked, the kubelet's reason (Evicted, ...) and a disruption.
        if "deletionGracePeriodSeconds" in meta:
            slim["metadata"]["deletionGracePeriodSeconds"] = meta["deletionGracePeriodSeconds"]
        for key in ("reason", "message"):
            if at(pod, "status", key):
                status[key] = at(pod, "status", key)
        disruptions = [c for c in objects(at(pod, "status", "conditions"))
                       if c.get("type") == DISRUPTION_TARGET]
        if disruptions:
            status["conditions"] = disruptions
        # Each container's end; one that never started keeps the kubelet's words.
        status["containerStatuses"] = [_container_end(c) for c in objects(
            at(pod, "status", "containerStatuses"))]
    if status:
        slim["status"] = status
    return slim


def _waiting(pod: JSON) -> JSON:
    """What `outcomes.waiting_words` reads of a pod that cannot start, in the pod's own
    shape: its PodScheduled condition while False, and the containers waiting for an
    image they cannot pull (name, reason, message). Nothing once it is scheduled and its
    images are pulled, so a running build's pod stays a few hundred bytes."""
    kept: JSON = {}
    scheduled = [{k: c[k] for k in ("type", "status", "reason", "message") if k in c}
                 for c in objects(at(pod, "status", "conditions"))
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"]
    if scheduled:
        kept["conditions"] = scheduled
    waiting = [{"name": c.get("name"), "state": {"waiting": {
                    k: w[k] for k in ("reason", "message") if k in w}}}
               for c in objects(at(pod, "status", "containerStatuses"))
               if (w := mapping(at(c, "state", "waiting"))).get("reason")
               in IMAGE_WAITING_REASONS]
    if waiting:
        kept["containerStatuses"] = waiting
    return kept


def _container_end(container: JSON) -> JSON:
    """A container's name and, once it terminated, its exit code and message; one waiting
    for an image it cannot pull keeps that (the kubelet's reason and message)."""
    terminated = mapping(at(container, "state", "terminated"))
    end = {k: terminated[k] for k in ("exitCode", "message") if k in terminated}
    waiting = mapping(at(container, "state", "waiting"))
    if not terminated and waiting.get("reason") in IMAGE_WAITING_REASONS:
        return {"name": container.get("name"), "state": {"waiting": {
            k: waiting[k] for k in ("reason", "message") if k in waiting}}}
    return {"name": container.get("name"),
            "state": {"terminated": end} if terminated else {"running": {}}}


def ending(pod: JSON | None) -> bool:
    """Whether a pod is on its way out with a container still running: what it ends as
    is not known yet."""
    return (pod is not None and bool(at(pod, "metadata", "deletionTimestamp"))
            and at(pod, "status", "phase") not in ("Succeeded", "Failed"))


class EndedPods:
    """The last state of the runs' pods deleted while they ended (a cancel's), for a
    while: the pod informer's store forgets a pod at its deletion, and a build that ended
    in the grace period (its image pushed) is known only by that last state. Bounded: the
    oldest go first; a controller that restarts knows none (README says so)."""

    LIMIT = 1024

    def __init__(self) -> None:
        self._pods: OrderedDict[str, JSON] = OrderedDict()

    def record(self, pod: JSON) -> None:
        self._pods[key_of(pod)] = pod
        self._pods.move_to_end(key_of(pod))
        while len(self._pods) > self.LIMIT:
            self._pods.popitem(last=False)

    def get(self, key: str) -> JSON | None:
        return self._pods.get(key)


def finished_buildrun(buildrun: JSON) -> bool:
    """The BuildRun informer's freeze rule (Store): a finished BuildRun is kept packed
    (store.Packer). Its outcome is frozen (the CRD refuses any later status write) and it
    is read only when an event or its TTL wakes it, or its Build's limits are applied,
    unpacked on those reads. (The TaskRun
    and PipelineRun informers freeze a finished run, outcomes.run_finished: read when its
    BuildRun finishes, then only to see it finished.)"""
    return phase_of(buildrun) is Phase.DONE


def _waiting_build(buildrun: JSON) -> list[str]:
    return build_names(buildrun) if phase_of(buildrun) is Phase.NEW else []


# Store.by_index(NEW_BY_BUILD, "namespace/build") -> the BuildRuns of that Build not started
# yet: what a Build's event wakes (row 9). Only those are read: a Build with 20,000
# finished BuildRuns cost 20,000 decodes per event of the Build through its BY_BUILD index.
NEW_BY_BUILD = "new-by-build"


def _unfinished_build(buildrun: JSON) -> list[str]:
    return build_names(buildrun) if phase_of(buildrun) is not Phase.DONE else []


# Store.by_index(UNFINISHED_BY_BUILD, "namespace/build") -> the BuildRuns of that Build not
# finished: where a NEW BuildRun of a serial Build stands (serial.standing), without
# decoding the Build's finished ones.
UNFINISHED_BY_BUILD = "unfinished-by-build"


def _serial_waiting(buildrun: JSON) -> list[str]:
    waits = (phase_of(buildrun) is Phase.NEW and mapping(succeeded_condition(
        buildrun.get("status"))).get("reason") == SERIAL_RUN_WAITING)
    return [buildrun["metadata"]["namespace"]] if waits else []


# Store.index_counts(SERIAL_WAITING) -> per namespace, how many BuildRuns wait behind
# another of their serial Build (state table row 11): metrics.buildrun_serial_waiting.
SERIAL_WAITING = "serial-waiting"
NEW_BY_BUILD_INDEXERS: dict[str, Indexer] = {NEW_BY_BUILD: _waiting_build,
                                             UNFINISHED_BY_BUILD: _unfinished_build,
                                             SERIAL_WAITING: _serial_waiting}


def _waiting_reason(buildrun: JSON) -> list[str]:
    """Why a started BuildRun waits, as its condition says it: Tekton's reason (Pending,
    ExceededNodeResources, PullImageFailed, ...) as a metric label (reasons.metric_reason);
    none once it runs, is being cancelled, or has finished."""
    if phase_of(buildrun) is not Phase.RUNNING:
        return []
    condition = succeeded_condition(buildrun.get("status")) or {}
    reason = text(condition.get("reason"))
    if condition.get("status") != "Unknown" or reason in ("", RUNNING, BUILD_RUN_CANCELED):
        return []
    return [metric_reason(reason)]


# Store.index_counts(WAITING) -> how many BuildRuns wait now, by reason: the gauge
# buildrun_waiting (metrics.WAITING), read at scrape time.
WAITING = "waiting"
WAITING_INDEXERS: dict[str, Indexer] = {WAITING: _waiting_reason}


# Store.by_index(BY_BUILDRUN, "namespace/buildrun") -> the TaskRuns (PipelineRuns) of that
# BuildRun, whatever their names (Shipwright names its own with generateName).
BY_BUILDRUN = "buildrun"


def _going_build(run: JSON) -> list[str]:
    build = text(mapping(run["metadata"].get("labels")).get(LABEL_BUILD))
    return [f"{run['metadata']['namespace']}/{build}"] if build and not run_finished(run) else []


# Store.by_index(GOING_BY_BUILD, "namespace/build") -> the runs of that Build's BuildRuns
# that have not finished (their build.shipwright.io/name label, which Shipwright's and our
# runs carry): a serial Build's next BuildRun waits for them (serial.standing).
GOING_BY_BUILD = "going-by-build"
EXECUTOR_INDEXERS: dict[str, Indexer] = {BY_BUILDRUN: _owner_keys, GOING_BY_BUILD: _going_build}


@dataclass(frozen=True)
class Caches:
    """One Store per kind the reconciler reads. A miss is asked of the API server
    (`read`), so an empty store is slower, never wrong."""

    # setup.py's BuildRun informer keeps these indexes; so does the default (unit tests).
    buildruns: Store = field(default_factory=lambda: Store(
        BUILDRUN_INDEXERS | NEW_BY_BUILD_INDEXERS))
    taskruns: Store = field(default_factory=lambda: Store(EXECUTOR_INDEXERS))
    # Filled only with BUILDRUN_EXECUTOR=PipelineRun (no informer otherwise: a read misses
    # and asks the API server, for a BuildRun started as a PipelineRun before a switch).
    pipelineruns: Store = field(default_factory=lambda: Store(EXECUTOR_INDEXERS))
    builds: Store = field(default_factory=Store)
    strategies: Store = field(default_factory=Store)
    cluster_strategies: Store = field(default_factory=Store)
    service_accounts: Store = field(default_factory=Store)
    # The pods of BuildRuns' runs, as `slim_pod` keeps them: read for metrics, and for a
    # cancelled run's pod on its way out.
    pods: Store = field(default_factory=Store)
    # Those pods' last state at their deletion while they ended (setup.py records them).
    ended_pods: EndedPods = field(default_factory=EndedPods)
    # Kinds with no informer (PipelineRuns with BUILDRUN_EXECUTOR=TaskRun): their store
    # stays empty and no event of theirs wakes a BuildRun, so one that runs as such a
    # kind is read with a GET and looked at again every UNWATCHED_POLL seconds.
    unwatched: frozenset[Resource] = frozenset()
    # The stores above by (group, plural), made once by __post_init__.
    _by_plural: dict[tuple[str, str], Store] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # By plural, built once: a dict of Resources built per call (each hashing a
        # dataclass) was a third of what judging a finished BuildRun at start cost.
        stores = {BUILDRUNS: self.buildruns, TASKRUNS: self.taskruns,
                  PIPELINERUNS: self.pipelineruns, BUILDS: self.builds,
                  BUILDSTRATEGIES: self.strategies,
                  CLUSTERBUILDSTRATEGIES: self.cluster_strategies,
                  SERVICEACCOUNTS: self.service_accounts, PODS: self.pods}
        object.__setattr__(self, "_by_plural",
                           {(r.group, r.plural): store for r, store in stores.items()})

    def store(self, resource: Resource) -> Store:
        return self._by_plural[(resource.group, resource.plural)]

    async def read(self, kube: Kube, resource: Resource, namespace: str,
                   name: str) -> JSON | None:
        """From the cache; a miss is asked of the API server, so an object the watch
        has not delivered yet is found and an absence is confirmed before any verdict
        (a terminal status cannot be taken back)."""
        cached = self.store(resource).get(f"{namespace}/{name}" if resource.namespaced
                                          else name)
        if cached is not None:
            return cached
        return await kube.get_or_none(resource, namespace, name)

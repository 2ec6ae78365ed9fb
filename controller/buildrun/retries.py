"""Infrastructure failures retried, user failures never (issue 43 part 3). Pure.

Opt-in: `--infrastructure-retries N`, or the annotation
`buildrun-controller.dev/infrastructure-retries: "N"` on a BuildRun or its Build (the
BuildRun's first, then the Build's, then the flag). A TaskRun that failed for a reason of
the infrastructure, not of the build, is then run again as a new TaskRun, up to N times,
before the BuildRun's completionTime is set; the last attempt's outcome is the BuildRun's,
written once. Shipwright v0.20.13 retries nothing: the first failure is the outcome
(an evicted pod is PodEvicted, a pod deleted under a running build Failed).

What counts as the infrastructure's is a closed set (`infrastructure_failure`), each read
off the finished TaskRun and its pod; anything else is the build's own and never retried
(a step's non-zero exit, its OOM, a timeout, a cancel, an image that does not exist):

- Tekton's reason PodEvicted (Tekton v1.12, pkg/pod/status.go getFailureInfo: the pod's
  status.reason is "Evicted", the kubelet's eviction under node pressure), or the pod's
  own status.reason: Evicted, NodeLost (the node controller, a node gone), Terminated
  (the kubelet's graceful node shutdown), UnexpectedAdmissionError (the kubelet refused
  the pod for its own fault);
- the pod's DisruptionTarget condition (Kubernetes' "about to be terminated due to a
  disruption": the eviction API, the taint manager on a lost node, the pod garbage
  collector, the scheduler's preemption, the kubelet);
- the pod deleted under the running build: its deletion asked before the TaskRun failed
  (Tekton deletes the pod itself only for a cancel or a timeout, which are the build's);
- TaskRunImagePullFailed whose message says the pull timed out or the registry was
  unreachable or overloaded, never one that says the image or its tag does not exist,
  or that access was denied.

A TaskRun's pod deleted before Tekton saw it fail is Tekton's to handle: it makes the pod
again under the same TaskRun (pkg/reconciler/taskrun reconcile: a pod NotFound "will
result in the Pod being created below"), so no retry of ours is needed for it.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

from controller.buildrun.annotations import INFRASTRUCTURE_ATTEMPTS, INFRASTRUCTURE_RETRIES
from controller.buildrun.reasons import (
    POD_DELETED,
    POD_DISRUPTED,
    POD_EVICTED,
    TASK_RUN_CANCELLED,
    TASK_RUN_TIMEOUT,
)
from controller.runtime.kube import JSON
from controller.runtime.shapes import at, mapping, objects, text
from controller.runtime.timestamps import parse_time
from controller.shipwright.conditions import succeeded_condition

# At most this many retries, whatever is asked: a run is a build, minutes of a node.
MAX_RETRIES = 10
# Tekton's reason for a failed image pull (taskrun_types.go TaskRunReasonImagePullFailed).
IMAGE_PULL_FAILED = "TaskRunImagePullFailed"
# The pod's status.reason values the kubelet and the node controller set for a pod they
# ended, not the build (Kubernetes: eviction, node lost, graceful node shutdown, admission).
POD_REASONS = frozenset({"Evicted", "NodeLost", "Terminated", "UnexpectedAdmissionError"})
# Kubernetes' pod condition for a disruption (k8s.io/api core/v1 DisruptionTarget).
DISRUPTION_TARGET = "DisruptionTarget"
# A pull that did not get an answer (containerd's and the registry client's words), and
# words that say the image is not there or not ours to pull: those win.
_TRANSIENT_PULL = ("i/o timeout", "deadline exceeded", "tls handshake timeout",
                   "connection reset", "connection refused", "no route to host",
                   "too many requests", "toomanyrequests", "503 service unavailable",
                   "502 bad gateway", "504 gateway timeout", "unexpected eof")
_PERMANENT_PULL = ("not found", "manifest unknown", "name unknown", "unauthorized",
                   "denied", "forbidden", "invalid reference", "invalidimagename")


@dataclass(frozen=True)
class Failure:
    """Why a run failed for the infrastructure: a reason of this module's (or Tekton's,
    PodEvicted, TaskRunImagePullFailed) and the words that told it."""

    reason: str
    message: str


def infrastructure_failure(run: JSON, pod: JSON | None) -> Failure | None:
    """The infrastructure failure a finished, failed TaskRun shows, or None: it succeeded,
    it failed on its own, or nothing known says otherwise (the module's closed set). `pod`
    is its pod, live or as last seen (None when it is gone and unknown)."""
    condition = succeeded_condition(mapping(run.get("status"))) or {}
    if condition.get("status") != "False":
        return None
    reason, message = text(condition.get("reason")), text(condition.get("message"))
    if reason in (TASK_RUN_CANCELLED, TASK_RUN_TIMEOUT):
        return None  # a cancel or a timeout is the build's (Tekton deletes the pod then)
    if reason == POD_EVICTED:
        return Failure(POD_EVICTED, text(at(pod, "status", "message")) or message)
    if reason == IMAGE_PULL_FAILED:
        lowered = message.lower()
        if (any(word in lowered for word in _TRANSIENT_PULL)
                and not any(word in lowered for word in _PERMANENT_PULL)):
            return Failure(IMAGE_PULL_FAILED, message)
        return None
    if pod is None:
        return None
    pod_status = mapping(pod.get("status"))
    if text(pod_status.get("reason")) in POD_REASONS:
        return Failure(text(pod_status["reason"]), text(pod_status.get("message")))
    for cond in objects(pod_status.get("conditions")):
        if cond.get("type") == DISRUPTION_TARGET and cond.get("status") == "True":
            return Failure(POD_DISRUPTED, f"{text(cond.get('reason'))}: "
                                          f"{text(cond.get('message'))}")
    deleted = deletion_asked(pod)
    ended = parse_time(text(at(run, "status", "completionTime")))
    if deleted is not None and ended is not None and deleted <= ended:
        return Failure(POD_DELETED, f"pod {text(at(pod, 'metadata', 'name'))} was deleted "
                                    "while the build ran")
    return None


def deletion_asked(pod: JSON) -> datetime.datetime | None:
    """When the pod's deletion was asked: its deletionTimestamp is that moment plus the
    grace period it was given (deletionGracePeriodSeconds)."""
    meta = mapping(pod.get("metadata"))
    at_ = parse_time(text(meta.get("deletionTimestamp")))
    if at_ is None:
        return None
    grace = meta.get("deletionGracePeriodSeconds")
    seconds = grace if isinstance(grace, int) and not isinstance(grace, bool) else 0
    return at_ - datetime.timedelta(seconds=seconds)


@dataclass(frozen=True)
class Policy:
    """The flags: retries when neither the BuildRun nor its Build says (0: off), and the
    delay before the first retry, doubled for each one after it."""

    retries: int = 0
    delay: float = 10.0


# Off: the default everywhere one is not given (Shipwright retries nothing).
OFF = Policy()


@dataclass(frozen=True)
class Limit:
    """How many retries a BuildRun gets, and where that came from; `error` says why an
    annotation was not read (its value is then ignored: off)."""

    retries: int
    error: str = ""


def parse_limit(value: str, where: str) -> Limit:
    """An annotation's value: a whole number from 0 to MAX_RETRIES."""
    stripped = value.strip()
    if stripped.isdigit() and int(stripped) <= MAX_RETRIES:
        return Limit(int(stripped))
    return Limit(0, f"{where}'s annotation {INFRASTRUCTURE_RETRIES}: "
                    f"{value!r} is not a whole number from 0 to {MAX_RETRIES}; infrastructure "
                    "failures are not retried")


def limit_of(buildrun: JSON, build: JSON | None, default: int) -> Limit:
    """The retries asked for: the BuildRun's annotation, else its Build's, else the flag."""
    for obj, where in ((buildrun, "the BuildRun"), (build, "the Build")):
        value = mapping(at(obj, "metadata", "annotations")).get(
            INFRASTRUCTURE_RETRIES)
        if isinstance(value, str):
            return parse_limit(value, where)
    return Limit(default)


@dataclass(frozen=True)
class Attempt:
    """One failed attempt, as recorded on the BuildRun (INFRASTRUCTURE_ATTEMPTS)."""

    task_run: str
    reason: str
    message: str
    time: str

    def as_json(self) -> JSON:
        return {"taskRun": self.task_run, "reason": self.reason, "message": self.message,
                "time": self.time}


def attempts_of(buildrun: JSON) -> list[Attempt]:
    """The attempts recorded on the BuildRun; an entry that is no such record (the
    annotation edited by hand) is skipped, and a value that is no JSON list reads as none."""
    raw = mapping(at(buildrun, "metadata", "annotations")).get(
        INFRASTRUCTURE_ATTEMPTS)
    try:
        entries = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return []
    return [Attempt(text(e.get("taskRun")), text(e.get("reason")), text(e.get("message")),
                    text(e.get("time")))
            for e in (entries if isinstance(entries, list) else [])
            if isinstance(e, dict) and text(e.get("taskRun"))]


def with_attempt(buildrun: JSON, attempt: Attempt) -> str:
    """The annotation's value with `attempt` added (once)."""
    recorded = attempts_of(buildrun)
    if any(a.task_run == attempt.task_run for a in recorded):
        return json.dumps([a.as_json() for a in recorded], separators=(",", ":"))
    return json.dumps([a.as_json() for a in [*recorded, attempt]], separators=(",", ":"))


def delay(base: float, attempt: int) -> float:
    """Seconds before attempt number `attempt` (2 is the first retry): `base`, doubled for
    each retry after the first."""
    return float(base * 2 ** max(attempt - 2, 0))


def retry_run(failed: JSON, name: str) -> JSON:
    """The next attempt's TaskRun: the failed one's spec, labels, annotations and owner
    (Shipwright's label set, so `shp` and selectors find it, and the BuildRun owns it)
    under `name`; nothing of the API server's or Tekton's (status, uid, resourceVersion,
    spec.status of a cancel)."""
    meta = mapping(failed.get("metadata"))
    kept = {k: meta[k] for k in ("namespace", "labels", "annotations", "ownerReferences")
            if k in meta}
    spec = {k: v for k, v in mapping(failed.get("spec")).items()
            if k not in ("status", "statusMessage")}
    return {"apiVersion": failed.get("apiVersion"), "kind": failed.get("kind"),
            "metadata": {**json.loads(json.dumps(kept)), "name": name},
            "spec": json.loads(json.dumps(spec))}

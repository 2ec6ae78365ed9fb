"""Reading a BuildRun: its phase, its deadlines, the executor (TaskRun or PipelineRun) it
records, and the metadata Shipwright links to its Build. Pure functions of the object (and
a clock)."""

from __future__ import annotations

import datetime

from controller.buildrun.annotations import PENDING_TIMEOUT
from controller.buildrun.reasons import BUILD_RUN_CANCELED, INVALID_PENDING_TIMEOUT, RUNNING
from controller.buildrun.resources.phases import run_name
from controller.buildrun.spec import parse_duration
from controller.buildrun.states import Phase
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON
from controller.runtime.name_rules import label_value_errors
from controller.runtime.shapes import at, mapping, objects, text
from controller.runtime.timestamps import parse_time
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILD, LABEL_BUILD_GENERATION
from controller.shipwright.recorded_executor import recorded_executor
from controller.shipwright.resources import BUILDRUNS, BUILDS

# spec.state of a BuildRun the user cancels (Shipwright spells the reason the same).
CANCELED = "BuildRunCanceled"


def spec_of(buildrun: JSON) -> JSON:
    """The spec, or {}: the schema admits a BuildRun without one (or `spec: null`)."""
    return mapping(buildrun.get("spec"))


def status_of(buildrun: JSON) -> JSON:
    """The status, or {} (none yet, or not an object)."""
    return mapping(buildrun.get("status"))


def phase_of(buildrun: JSON) -> Phase:
    status = status_of(buildrun)
    if status.get("completionTime"):
        return Phase.DONE
    return Phase.RUNNING if recorded_executor(status) is not None else Phase.NEW


def canceled(buildrun: JSON) -> bool:
    return spec_of(buildrun).get("state") == CANCELED


def recorded_executor_name(buildrun: JSON) -> str:
    """The executor's recorded name, else the deterministic name (a TaskRun or PipelineRun
    created by a try whose status write was lost)."""
    recorded = recorded_executor(status_of(buildrun))
    return recorded.name if recorded is not None else run_name(buildrun)


def retention_ttl(buildrun: JSON) -> float | None:
    """ttlAfterSucceeded or ttlAfterFailed, as Shipwright's TTL cleanup reads it: the
    BuildRun's live spec.retention first (a user may lower or raise it once the BuildRun
    has finished: the CRD's rule), else the effective one snapshotted at start (BuildRun
    over Build), which a BuildRun that failed before it had one lacks. None when neither
    sets it, or when the one found does not parse (reported as InvalidRetention had the
    run not started yet; set later, it keeps the BuildRun rather than delete on a guess)."""
    status = status_of(buildrun)
    succeeded = (succeeded_condition(status) or {}).get("status") == "True"
    key = "ttlAfterSucceeded" if succeeded else "ttlAfterFailed"
    for retention in (spec_of(buildrun).get("retention"), at(status, "buildSpec",
                                                                 "retention")):
        ttl = mapping(retention).get(key)
        if ttl:
            try:
                return parse_duration(text(ttl))
            except ValueError:
                return None
    return None


def run_start(run: JSON | None) -> str | None:
    """When Tekton started the run (its status.startTime, a TaskRun's or PipelineRun's),
    which Shipwright copies into the BuildRun's; None until Tekton has (or when what it
    holds is no time)."""
    start = text(at(run, "status", "startTime"))
    return start if parse_time(start) is not None else None


def run_completion(run: JSON | None) -> str | None:
    """When Tekton ended the run (its status.completionTime), which Shipwright copies into
    the BuildRun's when the run decides the outcome; None until it has."""
    end = text(at(run, "status", "completionTime"))
    return end if parse_time(end) is not None else None


def deadline_left(buildrun: JSON, run: JSON | None, timeout: float | None,
                  now: datetime.datetime, grace: float) -> float | None:
    """Seconds until the timeout backstop (0.0 once passed), None without a timeout.

    Tekton ends a run at its own timeout (`timeout`: the TaskRun's spec.timeout, the
    PipelineRun's timeouts.pipeline, as Executor.timeout reads it), counted from the run's
    status.startTime, which the BuildRun's startTime copies; the BuildRun then ends
    BuildRunTimeout from the run's outcome. This deadline is only for a run Tekton never
    ends (its controller down or stuck): `grace` seconds after Tekton's, counted from the
    same start, or from the run's creation while Tekton has not started it."""
    if timeout is None:
        return None
    start = (text(status_of(buildrun).get("startTime")) or run_start(run)
             or text(at(run, "metadata", "creationTimestamp")))
    return _left(start, timeout + grace, now)


def annotated_pending_timeout(obj: JSON | None, kind: str) -> float | None:
    """The pending timeout an object's annotation (annotations.PENDING_TIMEOUT) asks for,
    in seconds (0.0: none), None when it has none. UserError (InvalidPendingTimeout)
    when its value is no duration, naming the object (`kind`, its name)."""
    value = mapping(at(obj, "metadata", "annotations")).get(PENDING_TIMEOUT)
    if value is None:
        return None
    try:
        return parse_duration(text(value))
    except ValueError as exc:
        name = text(at(obj, "metadata", "name"))
        raise UserError(INVALID_PENDING_TIMEOUT,
                        f"{kind} {name!r}: annotation {PENDING_TIMEOUT}: {exc}") from None


def pending_timeout(buildrun: JSON, build: JSON | None, default: float | None, *,
                    started: bool = False) -> float | None:
    """Seconds the BuildRun's run may wait to run (None: no limit): the BuildRun's
    annotation, else its Build's, else `default` (--pending-timeout); "0s" is no limit.
    Raises UserError for a value that is no duration (checked before the BuildRun starts,
    plan.py); once `started`, such a value is read as none: the BuildRun is not failed
    for an annotation made bad while its run exists."""
    for obj, kind in ((buildrun, BUILDRUNS.kind), (build, BUILDS.kind)):
        try:
            seconds = annotated_pending_timeout(obj, kind)
        except UserError:
            if not started:
                raise
            continue
        if seconds is not None:
            return seconds or None
    return default


def run_reported_running(run: JSON) -> bool:
    """Whether Tekton has said the run runs (its Succeeded condition's reason Running, a
    TaskRun's pod phase Running) or has ended it."""
    condition = succeeded_condition(run.get("status")) or {}
    return condition.get("reason") == RUNNING or condition.get("status") in ("True", "False")


def pending_left(run: JSON | None, timeout: float | None,
                 now: datetime.datetime) -> float | None:
    """Seconds until the pending deadline (0.0 once passed): `timeout` after the run's
    creation (the BuildRun's start); None without a timeout, without a run, or once
    Tekton has reported it Running."""
    if run is None or timeout is None or run_reported_running(run):
        return None
    return _left(text(at(run, "metadata", "creationTimestamp")), timeout, now)


def cancel_asked_at(buildrun: JSON) -> str | None:
    """When the controller asked the run to stop for a cancel: the lastTransitionTime of
    the Unknown/BuildRunCanceled condition it showed then (status_writes.cancel_asked);
    None before it has."""
    condition = succeeded_condition(status_of(buildrun)) or {}
    if condition.get("status") != "Unknown" or condition.get("reason") != BUILD_RUN_CANCELED:
        return None
    return text(condition.get("lastTransitionTime")) or None


def cancel_left(buildrun: JSON, now: datetime.datetime, grace: float) -> float | None:
    """Seconds until the cancel backstop (0.0 once passed): `grace` after the cancel was
    asked, the time Tekton has to confirm it; None before it was asked."""
    return _left(cancel_asked_at(buildrun), grace, now)


def pod_wait_left(run: JSON, now: datetime.datetime, grace: float) -> float | None:
    """Seconds the end of a cancelled run's pod is still awaited (0.0 once not): `grace`
    after the run ended (its pod's grace period is Kubernetes' 30 s by default)."""
    return _left(run_completion(run), grace, now)


def ttl_left(buildrun: JSON, now: datetime.datetime) -> float | None:
    """Seconds until the retention TTL deletes the BuildRun (0.0 once due), or None."""
    return _left(text(status_of(buildrun).get("completionTime")), retention_ttl(buildrun), now)


def _left(since: str | None, seconds: float | None, now: datetime.datetime) -> float | None:
    start = parse_time(since)
    if seconds is None or start is None:
        return None
    return max((start + datetime.timedelta(seconds=seconds) - now).total_seconds(), 0.0)


def with_executor(status: JSON) -> JSON:
    """A copy of `status`, with `executor` beside a `taskRunName` written before it was
    (a BuildRun started by an older version of this controller), as Shipwright fills it."""
    status = dict(status)
    recorded = recorded_executor(status)
    if recorded is not None and not status.get("executor"):
        # Recorded only as taskRunName (written before executor existed): a TaskRun.
        status["executor"] = {"kind": recorded.kind, "name": recorded.name}
    return status


def without_service_account(buildrun: JSON) -> JSON:
    """The BuildRun with spec.serviceAccount left out (a shallow copy)."""
    spec = {k: v for k, v in spec_of(buildrun).items() if k != "serviceAccount"}
    return {**buildrun, "spec": spec}


def build_link(buildrun: JSON, build: JSON) -> JSON:
    """The metadata merge patch `Actions.link_to_build` sends ({} when nothing is missing): the
    Build's name and generation labels, and with retention.atBuildDeletion the Build as
    an owner (over the resourceVersion read: a list is replaced whole)."""
    meta = buildrun["metadata"]
    bmeta = build["metadata"]
    change: JSON = {}
    labels = {LABEL_BUILD: bmeta["name"],
              LABEL_BUILD_GENERATION: str(bmeta.get("generation") or "")}
    # A validated Build's name is a label value (Shipwright's BuildNameInvalid otherwise).
    if (bmeta.get("generation") and not label_value_errors(bmeta["name"])
            and any((meta.get("labels") or {}).get(k) != v for k, v in labels.items())):
        change["labels"] = labels
    refs = meta.get("ownerReferences") or []
    if ((build.get("spec") or {}).get("retention") or {}).get("atBuildDeletion") and not any(
            r.get("uid") == bmeta["uid"] for r in refs):
        refs = [r for r in refs if r.get("kind") != "Build"]
        refs.append({"apiVersion": build["apiVersion"], "kind": "Build",
                     "name": bmeta["name"], "uid": bmeta["uid"]})
        change["ownerReferences"] = refs
        change["resourceVersion"] = meta["resourceVersion"]
    return change


def owner_conflict(buildrun: JSON, build: JSON) -> str | None:
    """Why Shipwright could not make `build` the BuildRun's controller, in its words, or
    None. With retention.atBuildDeletion Shipwright sets the Build as the BuildRun's
    controller reference (controllerutil.SetControllerReference), which fails when
    another object already controls the BuildRun (an ownerReference with `controller:
    true`), unless the Build owns it already (resources.IsOwnedByBuild: kind and name).
    Main fails the BuildRun with it (#2252); v0.20.13 runs it, and so does this
    controller unless --fail-on-owner-conflict (its Build owner reference is no
    controller reference, which another controller's never conflicts with)."""
    if not ((build.get("spec") or {}).get("retention") or {}).get("atBuildDeletion"):
        return None
    meta = buildrun["metadata"]
    name = build["metadata"]["name"]
    refs = list(objects(meta.get("ownerReferences")))
    if any(r.get("kind") == "Build" and r.get("name") == name for r in refs):
        return None
    for ref in refs:
        if ref.get("controller") is True:
            # controller-runtime's AlreadyOwnedError, as main quotes it.
            return ("unexpected error when trying to set the ownerreference: Object "
                    f"{meta.get('namespace')}/{meta['name']} is already owned by another "
                    f"{text(ref.get('kind'))} controller {text(ref.get('name'))}")
    return None


def owned_by(obj: JSON, buildrun: JSON) -> bool:
    """Whether the BuildRun (its uid, not its name: a namesake is another object) owns
    `obj`: a TaskRun or PipelineRun it runs as, the ServiceAccount `.generate` made for it.
    Only such an object is adopted or deleted, never one that happens to share a name."""
    uid = buildrun["metadata"].get("uid")
    return any(ref.get("uid") == uid and ref.get("kind") == "BuildRun"
               for ref in objects(at(obj, "metadata", "ownerReferences")))

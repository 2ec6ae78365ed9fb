"""One run at a time per Build, if the Build asks (issue 43): its run policy.

A Build annotated `buildrun-controller.dev/run-policy` (annotations.RUN_POLICY) runs its
BuildRuns one at a time, in the order of their creation (creationTimestamp, then name):

- `Serial`: a new BuildRun waits, its Succeeded condition Unknown/SerialRunWaiting with a
  message naming the BuildRun just ahead of it, until every earlier one has finished
  (state table row 11);
- `SerialLatestOnly`: the same, and a waiting BuildRun that a newer one of the Build
  supersedes ends BuildRunCanceled, the message naming the newest (row 10);
- `Parallel`, or no annotation: nothing changes (Shipwright's behaviour: every BuildRun
  starts at once).

Pure: who runs and who waits is worked out from the informers' caches alone (observe.py
hands the Build's unfinished BuildRuns and unfinished runs in), never from memory, so a
restart or a new leader keeps the order. A BuildRun that embeds its Build
(spec.build.spec) has no Build to annotate: nothing changes for it.

The Build's turn (annotations.SERIAL_TURN, `claim`): a BuildRun about to start first
writes its name and uid on the Build, by a merge patch that carries the resourceVersion it
read, so of two starters (two workers, or two replicas: one that lost its lease with a
start in flight) the API server lets one write and answers the other 409 Conflict; that
one reads the Build again and finds the turn taken. The holder keeps the turn until it has
finished, and goes first: whatever the order, every other BuildRun of the Build waits
behind it (`standing`'s `holder`), since its start may still be in flight elsewhere.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from controller.buildrun import reasons
from controller.buildrun.annotations import RUN_POLICY, SERIAL_TURN
from controller.buildrun.buildruns import canceled, phase_of
from controller.buildrun.states import Phase
from controller.runtime.errors import UserError
from controller.runtime.kube import JSON
from controller.runtime.shapes import at, mapping, objects, text


class RunPolicy(enum.Enum):
    PARALLEL = "Parallel"
    SERIAL = "Serial"
    SERIAL_LATEST_ONLY = "SerialLatestOnly"


def run_policy(build: JSON | None) -> RunPolicy:
    """The Build's run policy (PARALLEL without the annotation, or for an embedded build:
    None). A value it cannot be is the user's to fix: a UserError (row 8) naming the
    annotation and the values it may have, on every BuildRun of the Build until then."""
    if build is None:
        return RunPolicy.PARALLEL
    value = mapping(at(build, "metadata", "annotations")).get(RUN_POLICY)
    if value is None:
        return RunPolicy.PARALLEL
    for policy in RunPolicy:
        if value == policy.value:
            return policy
    allowed = ", ".join(repr(p.value) for p in RunPolicy)
    raise UserError(reasons.INVALID_RUN_POLICY,
                    f"the Build's annotation {RUN_POLICY} is {value!r}; it may be one of "
                    f"{allowed}, or absent")


def order_key(buildrun: JSON) -> tuple[str, str]:
    """The order a serial Build's BuildRuns run in: creationTimestamp (RFC 3339 in UTC as
    the API server writes it, so it sorts as text), then name (creationTimestamp has whole
    seconds: BuildRuns created in the same second run in the order of their names)."""
    meta = buildrun["metadata"]
    return text(meta.get("creationTimestamp")), text(meta.get("name"))


@dataclass(frozen=True)
class Standing:
    """Where a NEW BuildRun of a serial Build stands: the newest waiting BuildRun that
    supersedes it (SerialLatestOnly), else the BuildRun it waits behind; both "" when it
    may start."""

    superseded_by: str = ""
    behind: str = ""


def standing(buildrun: JSON, policy: RunPolicy, others: Iterable[JSON],
             run_owners: Iterable[tuple[str, str]], holder: str = "") -> Standing:
    """Where the NEW `buildrun` stands among `others`, its Build's BuildRuns not finished
    (itself among them or not), and `run_owners`, the (name, uid) of the BuildRuns whose
    runs (TaskRuns) of the Build have not finished: a BuildRun finished by a backstop may
    have one still stopping, and one whose status write is not in the cache yet has one
    already (by uid: a namesake's run still going is another BuildRun's). `holder` is the
    uid of the BuildRun that holds the Build's turn (`turn_of`; "" for none).

    It waits behind every BuildRun that is running, the one that holds the turn (it goes
    first: its start may be in flight), every run still going, and (Serial) every NEW one
    created before it (SerialLatestOnly: those are superseded by it); a NEW one canceled
    does not count (it finishes without a run). The holder itself waits only for the runs
    still going: no NEW one is ahead of it, and none supersedes it.
    The one named is the nearest ahead of it in the queue (the running ones and the
    holder first, then the waiting ones in the order): the latest waiting one created
    before it, else a running one, so the message changes only when that one does (a start
    ahead of it rewrites nothing)."""
    if policy is RunPolicy.PARALLEL:
        return Standing()
    uid, key = buildrun["metadata"].get("uid"), order_key(buildrun)
    mine = bool(holder) and uid == holder

    def first(b: JSON) -> bool:
        return phase_of(b) is Phase.RUNNING or (bool(holder) and b["metadata"].get("uid") == holder)

    rivals = [b for b in others if b["metadata"].get("uid") != uid
              and not (phase_of(b) is Phase.NEW and canceled(b))]
    if policy is RunPolicy.SERIAL_LATEST_ONLY and not mine:
        newer = [b for b in rivals if phase_of(b) is Phase.NEW and order_key(b) > key]
        if newer:
            return Standing(superseded_by=max(newer, key=order_key)["metadata"]["name"])
    # Under SerialLatestOnly the earlier NEW ones are superseded by this one: only a
    # running one (or the holder) is ahead of it.
    ahead = [b for b in rivals if first(b) or (
        policy is RunPolicy.SERIAL and not mine and order_key(b) < key)]
    if ahead:
        # The queue's order: the running ones first, then the waiting ones in the order.
        nearest = max(ahead, key=lambda b: (not first(b), order_key(b)))
        return Standing(behind=nearest["metadata"]["name"])
    going = sorted(name for name, owner in run_owners if owner != uid)
    return Standing(behind=going[-1] if going else "")


def turn_of(build: JSON | None) -> tuple[str, str] | None:
    """The (name, uid) of the BuildRun that holds the Build's turn (its SERIAL_TURN
    annotation), None when none does (or the value is not one the controller writes)."""
    value = mapping(at(build, "metadata", "annotations")).get(SERIAL_TURN)
    if not isinstance(value, str):
        return None
    name, slash, uid = value.partition("/")
    return (name, uid) if slash and name and uid else None


def turn_value(buildrun: JSON) -> str:
    """The SERIAL_TURN annotation that names `buildrun` as the holder: "NAME/UID" (a
    BuildRun's name holds no slash)."""
    meta = buildrun["metadata"]
    return f"{meta['name']}/{meta['uid']}"


@dataclass(frozen=True)
class Turn:
    """What a BuildRun about to start does with its Build's turn: `take` it (the write),
    start without a write (it holds it already: both false and empty), or wait `behind`
    the BuildRun that holds it."""

    take: bool = False
    behind: str = ""


def claim(buildrun: JSON, build: JSON, holder: JSON | None, run_going: bool = False) -> Turn:
    """Whether the NEW `buildrun` of the serial `build` may take the Build's turn, given
    `holder`, the BuildRun the turn names as last known (the cache's copy, else read live;
    None when it is gone), and `run_going`, whether a run of that one, finished or gone,
    is still going:

    - nobody holds it, or a BuildRun that has finished, is gone (its name holds another
      uid, or none), or is no BuildRun of this Build any more: take it, unless a run of
      that one is still going (then wait behind it: that run's end wakes this one);
    - it holds it already (an earlier try's write landed, its answer lost): start;
    - another BuildRun that has not finished holds it: wait behind that one, which goes
      first (if it is NEW without a run, its own reconcile starts it: a start that may
      also be in flight on a replica that lost its lease is at worst a second run of the
      same BuildRun, adopted by name, never two BuildRuns of the Build at once)."""
    held = turn_of(build)
    if held is None:
        return Turn(take=True)
    name, uid = held
    if uid == buildrun["metadata"].get("uid"):
        return Turn()
    if (holder is None or holder["metadata"].get("uid") != uid
            or phase_of(holder) is Phase.DONE
            or text(at(holder, "spec", "build", "name")) != build["metadata"]["name"]):
        return Turn(behind=name) if run_going else Turn(take=True)
    return Turn(behind=name)


def run_owner(run: JSON) -> tuple[str, str] | None:
    """The (name, uid) of the BuildRun that controls a run (its ownerReference)."""
    for ref in objects(at(run, "metadata", "ownerReferences")):
        if ref.get("kind") == "BuildRun" and ref.get("controller") is True:
            return text(ref.get("name")), text(ref.get("uid"))
    return None

"""What the truth soak saw of every BuildRun, TaskRun and pod, and its verdict against
the registry (soak.truth).

A BuildRun is judged by uid: one deleted and created again under the same name is
another BuildRun, with its own output tag. After every pod has ended, the registry's
manifest under a BuildRun's tag (RealNode.pushed) is what really happened, and the
BuildRun's outcome must say exactly that:

    pushed-not-succeeded   an image under its tag, but it did not end Succeeded
    succeeded-not-pushed   Succeeded, but nothing under its tag
    wrong-digest           Succeeded, but status.output.digest is not the registry's
    finished-twice         its status changed after completionTime was first seen
    runs-per-uid           more than one TaskRun whose controller owner is its uid
    foreign-run            its status names a TaskRun another BuildRun owns
    lost                   never finished, and was not deleted

A BuildRun deleted before it finished claims nothing, whatever its tag holds; a deleted
one that had finished is judged by the status it finished with. States come from the
soak's own list+watch (soak.watch), never the controller's caches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.buildrun.buildruns import recorded_executor
from controller.runtime.kube import JSON
from controller.shipwright.conditions import succeeded_condition
from soak.watch import Seen

MISMATCHES = ("pushed-not-succeeded", "succeeded-not-pushed", "wrong-digest",
              "finished-twice", "runs-per-uid", "foreign-run", "lost")

# The labels soak.truth puts on each BuildRun it creates.
KIND_LABEL = "truth.soak.buildrun-controller.test/kind"
ATTEMPT_LABEL = "truth.soak.buildrun-controller.test/attempt"

# Tekton's step containers (step-<name>) of a Shipwright build with managed push.
SOURCE_STEP, BUILD_STEP, PUSH_STEP = "step-source-default", "step-build", "step-image-processing"


def _controller_owner(obj: JSON) -> str | None:
    """The uid of the object's controller owner reference."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


@dataclass
class BuildRunSeen:
    """One BuildRun uid, as the soak's watch saw it."""

    uid: str
    name: str
    kind: str
    attempt: int
    image: str  # spec.output.image: its own tag
    created: str  # metadata.creationTimestamp
    states: int = 0
    final: JSON | None = None  # status when completionTime was first seen
    last: JSON | None = None  # the last status seen
    changed_after_end: list[str] = field(default_factory=list)
    deleted: bool = False

    @property
    def finished(self) -> bool:
        return self.final is not None

    def reason(self) -> str:
        """The Succeeded condition's reason it finished with ("" when unfinished)."""
        return str((succeeded_condition(self.final) or {}).get("reason") or "")

    def outcome(self) -> str:
        """Its reason, else "deleted before finishing" or "unfinished"."""
        return self.reason() or ("deleted before finishing" if self.deleted else "unfinished")

    def succeeded(self) -> bool:
        return (succeeded_condition(self.final) or {}).get("status") == "True"

    def digest(self) -> str | None:
        return ((self.final or {}).get("output") or {}).get("digest")


@dataclass
class RunSeen:
    """One TaskRun uid."""

    uid: str
    name: str
    owner: str | None  # its controller owner's uid (a BuildRun's)
    completion_time: str | None = None
    reason: str = ""
    message: str = ""
    ends: list[str] = field(default_factory=list)  # each terminal outcome Tekton gave it


@dataclass
class PodSeen:
    """One pod uid: its containers' last states ("waiting", "running", "terminated:<exit
    code>") and phase."""

    uid: str
    name: str
    run: str | None  # its TaskRun's uid
    phase: str = ""
    steps: dict[str, str] = field(default_factory=dict)
    finished_at: dict[str, str] = field(default_factory=dict)  # terminated containers'
    restarts: int = 0
    deleted: bool = False

    @property
    def ended(self) -> bool:
        return self.deleted or self.phase in ("Succeeded", "Failed")

    def terminated(self, step: str) -> bool:
        return self.steps.get(step, "").startswith("terminated")

    def succeeded(self, step: str) -> bool:
        return self.steps.get(step) == "terminated:0"


@dataclass(frozen=True)
class Mismatch:
    kind: str  # one of MISMATCHES
    name: str
    uid: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.name} (uid {self.uid}): {self.evidence}"


class Ledger:
    """Every state the soak's watches deliver (on_buildrun, on_taskrun, on_pod)."""

    def __init__(self) -> None:
        self.buildruns: dict[str, BuildRunSeen] = {}
        self.runs: dict[str, RunSeen] = {}
        self.pods: dict[str, PodSeen] = {}

    # -- what the watches deliver ---------------------------------------------------

    def on_buildrun(self, seen: Seen, obj: JSON) -> None:
        meta = obj["metadata"]
        uid = str(meta["uid"])
        b = self.buildruns.get(uid)
        if b is None:
            labels = meta.get("labels") or {}
            b = self.buildruns[uid] = BuildRunSeen(
                uid, meta["name"], str(labels.get(KIND_LABEL, "?")),
                int(labels.get(ATTEMPT_LABEL, 0)),
                str(((obj.get("spec") or {}).get("output") or {}).get("image") or ""),
                str(meta.get("creationTimestamp") or ""))
        if seen == "DELETED":
            b.deleted = True
            return
        b.states += 1
        status: JSON = obj.get("status") or {}
        if b.final is not None and status != b.final:
            b.changed_after_end.append(
                f"{_difference(b.final, status)} (resourceVersion {meta.get('resourceVersion')})")
        if b.final is None and status.get("completionTime"):
            b.final = status
        b.last = status

    def on_taskrun(self, seen: Seen, obj: JSON) -> None:
        meta = obj["metadata"]
        uid = str(meta["uid"])
        r = self.runs.setdefault(uid, RunSeen(uid, meta["name"], _controller_owner(obj)))
        status = obj.get("status") or {}
        r.completion_time = status.get("completionTime") or r.completion_time
        cond = succeeded_condition(status) or {}
        r.reason = str(cond.get("reason") or r.reason)
        r.message = str(cond.get("message") or r.message)
        if r.completion_time and cond.get("status") in ("True", "False"):
            end = f"{r.reason} at {r.completion_time}"
            if not r.ends or r.ends[-1] != end:
                r.ends.append(end)

    def on_pod(self, seen: Seen, obj: JSON) -> None:
        meta = obj["metadata"]
        uid = str(meta["uid"])
        p = self.pods.setdefault(uid, PodSeen(uid, meta["name"], _controller_owner(obj)))
        if seen == "DELETED":
            p.deleted = True
        status = obj.get("status") or {}
        p.phase = str(status.get("phase") or p.phase)
        for c in status.get("containerStatuses") or []:
            state = c.get("state") or {}
            if "terminated" in state:
                p.steps[c["name"]] = f"terminated:{state['terminated'].get('exitCode')}"
                p.finished_at[c["name"]] = str(state["terminated"].get("finishedAt") or "")
            elif "running" in state:
                p.steps[c["name"]] = "running"
            else:
                p.steps[c["name"]] = "waiting"
        p.restarts = max([p.restarts, *(int(c.get("restartCount") or 0)
                                         for c in status.get("containerStatuses") or [])])

    def on_buildruns_listed(self, items: list[JSON]) -> None:
        """A whole list: a BuildRun seen before and absent now was deleted meanwhile."""
        present = {str(obj["metadata"]["uid"]) for obj in items}
        for b in self.buildruns.values():
            b.deleted = b.deleted or b.uid not in present

    def on_pods_listed(self, items: list[JSON]) -> None:
        present = {str(obj["metadata"]["uid"]) for obj in items}
        for p in self.pods.values():
            p.deleted = p.deleted or p.uid not in present

    # -- questions --------------------------------------------------------------------

    def attempts(self, name: str) -> list[BuildRunSeen]:
        """The BuildRuns seen under `name`, by attempt."""
        return sorted((b for b in self.buildruns.values() if b.name == name),
                      key=lambda b: b.attempt)

    def runs_of(self, buildrun_uid: str) -> list[RunSeen]:
        return [r for r in self.runs.values() if r.owner == buildrun_uid]

    def pods_of(self, buildrun_uid: str) -> list[PodSeen]:
        runs = {r.uid for r in self.runs_of(buildrun_uid)}
        return [p for p in self.pods.values() if p.run in runs]

    def pod_of(self, buildrun_uid: str) -> PodSeen | None:
        """Its pod that has not ended, else any of its pods."""
        pods = self.pods_of(buildrun_uid)
        return next((p for p in pods if not p.ended), pods[0] if pods else None)

    def mid_build(self) -> list[str]:
        """Unfinished BuildRuns whose pod has cloned and is building: the source step
        ended, the build step not yet."""
        out = []
        for b in self.buildruns.values():
            pod = None if b.finished or b.deleted else self.pod_of(b.uid)
            if (pod is not None and not pod.ended and pod.succeeded(SOURCE_STEP)
                    and not pod.terminated(BUILD_STEP)):
                out.append(b.uid)
        return out

    def pods_running(self) -> list[str]:
        return [p.name for p in self.pods.values() if not p.ended]


def _difference(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    keys = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
    return "; ".join(f"{k}: {str(before.get(k))[:160]} -> {str(after.get(k))[:160]}"
                     for k in keys)


def judge(ledger: Ledger, registry: Mapping[str, str | None]) -> list[Mismatch]:
    """Every mismatch between what the BuildRuns said and `registry` (BuildRun uid ->
    the digest under its tag, None where nothing was pushed), and the run rules."""
    out: list[Mismatch] = []
    owner_of_run = {r.name: r.owner for r in ledger.runs.values()}
    for b in sorted(ledger.buildruns.values(), key=lambda b: (b.name, b.attempt)):
        def found(kind: str, evidence: str, b: BuildRunSeen = b) -> None:
            out.append(Mismatch(kind, b.name, b.uid, evidence))

        pushed = registry.get(b.uid)
        if b.finished:
            cond = succeeded_condition(b.final) or {}
            said = (f"status {cond.get('status')} {cond.get('reason')}, "
                    f"status.output.digest {b.digest()}")
            where = f"registry {b.image}: {pushed}"
            said += "".join(f"; its TaskRun {r.name}: {r.reason} {r.message[:200]}"
                            for r in ledger.runs_of(b.uid))
            if pushed and not b.succeeded():
                found("pushed-not-succeeded", f"{where}; {said}: {cond.get('message')}")
            elif b.succeeded() and not pushed:
                found("succeeded-not-pushed", f"{where}; {said}")
            elif b.succeeded() and b.digest() != pushed:
                found("wrong-digest", f"{where}; {said}")
        elif not b.deleted:
            found("lost", f"no completionTime; last status {str(b.last)[:300]}")
        if b.changed_after_end:
            found("finished-twice", f"{len(b.changed_after_end)} changes after "
                  f"completionTime, the first: {b.changed_after_end[0]}")
        runs = ledger.runs_of(b.uid)
        if len(runs) > 1:
            found("runs-per-uid", f"TaskRuns {sorted(r.name for r in runs)}")
        named = recorded_executor(b.last or {})
        if named and named in owner_of_run and owner_of_run[named] != b.uid:
            found("foreign-run", f"its status names TaskRun {named}, owned by uid "
                  f"{owner_of_run[named]}")
    return out


def by_kind(mismatches: list[Mismatch]) -> dict[str, int]:
    """Mismatches counted by kind, every kind listed (0 where none)."""
    counted = Counter(m.kind for m in mismatches)
    return {kind: counted.get(kind, 0) for kind in MISMATCHES}

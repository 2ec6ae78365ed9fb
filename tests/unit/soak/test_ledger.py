"""soak.ledger: the truth soak's verdict from the states its watches delivered and what
the registry holds, without a cluster: truthful runs pass, and each kind of lie is
caught."""

from __future__ import annotations

from typing import Any

from soak.ledger import (
    ATTEMPT_LABEL,
    BUILD_STEP,
    KIND_LABEL,
    MISMATCHES,
    PUSH_STEP,
    SOURCE_STEP,
    Ledger,
    by_kind,
    judge,
)

DIGEST, OTHER = "sha256:" + "a" * 64, "sha256:" + "b" * 64
JSON = dict[str, Any]


def buildrun(name: str, uid: str, attempt: int = 1, *, reason: str | None = None,
             digest: str | None = None, run: str | None = None, rv: str = "1") -> JSON:
    status: JSON = {}
    if run:
        status["executor"] = {"kind": "TaskRun", "name": run}
    if reason:
        succeeded = "True" if reason == "Succeeded" else "False"
        status.update(completionTime="2026-12-06T00:00:10Z", conditions=[
            {"type": "Succeeded", "status": succeeded, "reason": reason}])
        if digest:
            status["output"] = {"digest": digest}
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": rv,
                         "creationTimestamp": "2026-12-06T00:00:00Z",
                         "labels": {KIND_LABEL: "success", ATTEMPT_LABEL: str(attempt)}},
            "spec": {"output": {"image": f"127.0.0.1:5000/truth/{name}:a{attempt}"}},
            "status": status}


def taskrun(name: str, uid: str, owner: str, reason: str = "", ended: str = "") -> JSON:
    status: JSON = {}
    if reason:
        status = {"completionTime": ended, "conditions": [
            {"type": "Succeeded", "status": "True" if reason == "Succeeded" else "False",
             "reason": reason}]}
    return {"metadata": {"name": name, "uid": uid, "ownerReferences": [
        {"kind": "BuildRun", "uid": owner, "controller": True}]}, "status": status}


def pod(uid: str, run: str, **steps: JSON) -> JSON:
    return {"metadata": {"name": f"pod-{uid}", "uid": uid, "ownerReferences": [
        {"kind": "TaskRun", "uid": run, "controller": True}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": name, "state": state} for name, state in steps.items()]}}


def ledger_of(*buildruns: JSON) -> Ledger:
    ledger = Ledger()
    for b in buildruns:
        ledger.on_buildrun("MODIFIED", b)
    return ledger


def kinds(ledger: Ledger, registry: dict[str, str | None]) -> dict[str, int]:
    return {k: v for k, v in by_kind(judge(ledger, registry)).items() if v}


def test_truthful_outcomes_are_no_mismatch() -> None:
    ledger = ledger_of(buildrun("ok", "u1", reason="Succeeded", digest=DIGEST),
                       buildrun("failed", "u2", reason="Failed"),
                       buildrun("cancelled", "u3", reason="BuildRunCanceled"))
    assert judge(ledger, {"u1": DIGEST, "u2": None, "u3": None}) == []
    assert by_kind([]) == dict.fromkeys(MISMATCHES, 0)


def test_an_image_pushed_for_a_failed_or_cancelled_buildrun_is_a_mismatch() -> None:
    ledger = ledger_of(buildrun("c", "u1", reason="BuildRunCanceled"),
                       buildrun("f", "u2", reason="Failed", digest=DIGEST))
    (first, second) = judge(ledger, {"u1": DIGEST, "u2": DIGEST})
    assert (first.kind, first.name, second.kind) == (
        "pushed-not-succeeded", "c", "pushed-not-succeeded")
    assert DIGEST in first.evidence and "BuildRunCanceled" in first.evidence


def test_succeeded_needs_exactly_the_registrys_digest() -> None:
    ledger = ledger_of(buildrun("none", "u1", reason="Succeeded", digest=DIGEST),
                       buildrun("other", "u2", reason="Succeeded", digest=OTHER),
                       buildrun("missing", "u3", reason="Succeeded"))
    assert kinds(ledger, {"u1": None, "u2": DIGEST, "u3": DIGEST}) == {
        "succeeded-not-pushed": 1, "wrong-digest": 2}


def test_a_status_changed_after_completion_is_finished_twice() -> None:
    ledger = ledger_of(buildrun("a", "u1", reason="Failed", rv="1"))
    ledger.on_buildrun("MODIFIED", buildrun("a", "u1", reason="Failed", rv="2"))  # same status
    assert kinds(ledger, {"u1": None}) == {}
    ledger.on_buildrun("MODIFIED", buildrun("a", "u1", reason="Succeeded", digest=DIGEST,
                                            rv="3"))
    (m,) = judge(ledger, {"u1": None})
    assert m.kind == "finished-twice" and "conditions" in m.evidence and "Failed" in m.evidence


def test_unfinished_is_lost_unless_deleted_and_deleted_claims_nothing() -> None:
    ledger = ledger_of(buildrun("gone", "u1"), buildrun("stuck", "u2"))
    ledger.on_buildrun("DELETED", buildrun("gone", "u1"))
    assert kinds(ledger, {"u1": DIGEST, "u2": None}) == {"lost": 1}


def test_a_buildrun_or_pod_missing_from_a_relist_was_deleted_during_the_gap() -> None:
    # A watch cut by an API server restart resumes with a list (410 Gone): what was
    # deleted meanwhile shows only by its absence.
    ledger = ledger_of(buildrun("kept", "u1"), buildrun("gone", "u2"))
    ledger.on_taskrun("ADDED", taskrun("kept-aaaaa", "t1", "u1"))
    ledger.on_pod("ADDED", pod("p1", "t1"))
    ledger.on_buildruns_listed([buildrun("kept", "u1")])
    ledger.on_pods_listed([])
    assert kinds(ledger, {}) == {"lost": 1}  # "kept" is unfinished; "gone" claims nothing
    assert [b.name for b in ledger.buildruns.values() if b.deleted] == ["gone"]
    assert ledger.pods_running() == []


def test_runs_are_counted_per_uid_and_a_namesakes_run_is_foreign() -> None:
    old = buildrun("same", "u1", run="same-aaaaa")
    new = buildrun("same", "u2", attempt=2, reason="Succeeded", digest=DIGEST, run="same-aaaaa")
    ledger = ledger_of(old, new)
    ledger.on_buildrun("DELETED", old)
    for tr in (taskrun("same-aaaaa", "t1", "u1"), taskrun("same-bbbbb", "t2", "u2"),
               taskrun("same-ccccc", "t3", "u2")):
        ledger.on_taskrun("ADDED", tr)
    assert kinds(ledger, {"u1": None, "u2": DIGEST}) == {"runs-per-uid": 1, "foreign-run": 1}
    assert [b.attempt for b in ledger.attempts("same")] == [1, 2]


def test_a_pod_shows_mid_build_and_the_build_steps_end() -> None:
    ledger = ledger_of(buildrun("b", "u1"))
    ledger.on_taskrun("ADDED", taskrun("b-aaaaa", "t1", "u1"))
    running: JSON = {"running": {}}
    done: JSON = {"terminated": {"exitCode": 0, "finishedAt": "2026-12-06T00:00:05Z"}}
    ledger.on_pod("ADDED", pod("p1", "t1", **{SOURCE_STEP: running, BUILD_STEP: running}))
    assert ledger.mid_build() == []
    ledger.on_pod("MODIFIED", pod("p1", "t1", **{SOURCE_STEP: done, BUILD_STEP: running,
                                               PUSH_STEP: running}))
    assert ledger.mid_build() == ["u1"]
    ledger.on_pod("MODIFIED", pod("p1", "t1", **{SOURCE_STEP: done, BUILD_STEP: done,
                                               PUSH_STEP: running}))
    pod_seen = ledger.pod_of("u1")
    assert ledger.mid_build() == [] and pod_seen is not None
    assert pod_seen.succeeded(BUILD_STEP) and not pod_seen.terminated(PUSH_STEP)
    assert pod_seen.finished_at[BUILD_STEP] == "2026-12-06T00:00:05Z"
    assert ledger.pods_running() == ["pod-p1"]
    ledger.on_pod("DELETED", pod("p1", "t1"))
    assert ledger.pods_running() == []



def test_each_outcome_tekton_gives_a_taskrun_is_kept_in_order() -> None:
    ledger = Ledger()
    for tr in (taskrun("r", "t1", "u1"), taskrun("r", "t1", "u1", "Succeeded", "T1"),
               taskrun("r", "t1", "u1", "Succeeded", "T1"),
               taskrun("r", "t1", "u1", "TaskRunStopSidecarFailed", "T2")):
        ledger.on_taskrun("MODIFIED", tr)
    assert ledger.runs["t1"].ends == ["Succeeded at T1", "TaskRunStopSidecarFailed at T2"]

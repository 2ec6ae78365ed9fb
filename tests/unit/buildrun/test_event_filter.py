"""Which watch events queue a BuildRun (setup.buildrun_wakes, setup.run_wakes):
Shipwright's predBuildRun and predTaskRun, widened only where the README says why.
Our own label and status writes must not queue the BuildRun: each would retry a failing
key around its backoff (tests/cluster/test_retry_budget.py shows it on the server)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.buildrun.setup import buildrun_wakes, run_wakes

JSON = dict[str, Any]


def buildrun(rv: str = "1", generation: int = 1, **status: Any) -> JSON:
    return {"metadata": {"namespace": "ns", "name": "br", "resourceVersion": rv,
                         "generation": generation},
            "spec": {"build": {"name": "b"}}, "status": status}


def changed(obj: JSON, **status: Any) -> JSON:
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    new["status"] = {**obj["status"], **status}
    return new


def test_every_buildrun_is_looked_at_once_when_seen_and_never_on_deletion() -> None:
    """Looked at: a finished one's look is next_look's (test_actions.py), which costs no
    reconcile when nothing is due."""
    done = buildrun(completionTime="2026-12-04T00:00:00Z", taskRunName="tr")
    assert buildrun_wakes("ADDED", buildrun(), None)
    assert buildrun_wakes("ADDED", done, None)  # retention TTL, generated SA: rows 1-4
    assert not buildrun_wakes("DELETED", done, done)
    assert not buildrun_wakes("DELETED", buildrun(), None)


def test_our_own_label_and_status_writes_do_not_queue_it() -> None:
    new = buildrun()
    labelled = changed(new)
    labelled["metadata"]["labels"] = {"build.shipwright.io/name": "b"}
    assert not buildrun_wakes("MODIFIED", labelled, new)
    started = changed(labelled, taskRunName="tr", startTime="2026-12-04T00:00:00Z")
    progressed = changed(started, conditions=[{"type": "Succeeded", "reason": "Running"}])
    assert not buildrun_wakes("MODIFIED", progressed, started)


def test_a_phase_change_does_whoever_wrote_it() -> None:
    """The start's status write (its adopted TaskRun may have finished already) and the
    completion (rows 2-4 take over): each the last write of its try."""
    new = buildrun()
    started = changed(new, taskRunName="tr", startTime="2026-12-04T00:00:00Z")
    assert buildrun_wakes("MODIFIED", started, new)
    assert buildrun_wakes("MODIFIED", changed(new, completionTime="t"), new)  # user error


def test_a_cancel_a_completion_and_a_resync_do() -> None:
    running = buildrun(taskRunName="tr")
    canceled = changed(running)
    canceled["metadata"]["generation"] = 2
    canceled["spec"]["state"] = "BuildRunCanceled"
    assert buildrun_wakes("MODIFIED", canceled, running)
    finished = changed(running, completionTime="2026-12-04T00:00:00Z")
    assert buildrun_wakes("MODIFIED", finished, running)
    assert not buildrun_wakes("MODIFIED", changed(finished), finished)  # still finished
    assert buildrun_wakes("MODIFIED", running, running)  # resync: same resourceVersion


def test_a_namesake_a_relist_brings_does() -> None:
    """A relist brings a BuildRun deleted and created again meanwhile as an update of the
    one cached: new like it and of the same generation, but another object."""
    new = buildrun()
    namesake = changed(new)
    new["metadata"]["uid"], namesake["metadata"]["uid"] = "old", "namesake"
    assert buildrun_wakes("MODIFIED", namesake, new)
    same = changed(new)
    assert not buildrun_wakes("MODIFIED", same, new)  # the control: the same object


def taskrun(rv: str = "1", **status: Any) -> JSON:
    return {"metadata": {"namespace": "ns", "name": "tr", "resourceVersion": rv},
            "spec": {}, "status": status}


def cond(status: str, reason: str, message: str = "") -> list[JSON]:
    return [{"type": "Succeeded", "status": status, "reason": reason, "message": message}]


@pytest.mark.parametrize(("old_status", "new_status", "wakes"), [
    ({}, {"startTime": "t"}, True),
    ({"startTime": "t"}, {"startTime": "t", "podName": "p"}, False),
    ({"startTime": "t"}, {"startTime": "t", "conditions": cond("Unknown", "Pending")}, True),
    ({"conditions": cond("Unknown", "Pending")}, {"conditions": cond("Unknown", "Running")},
     True),
    ({"conditions": cond("Unknown", "Running", "a")},
     {"conditions": cond("Unknown", "Running", "b")}, True),
    ({"conditions": cond("Unknown", "Running")},
     {"conditions": cond("Unknown", "Running"), "steps": [{"name": "s"}]}, False),
    ({"conditions": cond("False", "Failed")},
     {"conditions": cond("False", "Failed"), "completionTime": "t"}, True),
    ({"conditions": cond("Unknown", "Running")},
     {"conditions": cond("True", "Succeeded"), "completionTime": "t"}, True),
])
def test_taskrun_updates_pass_as_shipwright_lets_them(
        old_status: JSON, new_status: JSON, wakes: bool) -> None:
    old = taskrun(**old_status)
    new = taskrun("2", **new_status)
    assert run_wakes("MODIFIED", new, old) is wakes


def test_taskrun_creation_resync_and_deletion_before_completion() -> None:
    running = taskrun(conditions=cond("Unknown", "Running"))
    assert run_wakes("ADDED", running, None)
    assert run_wakes("MODIFIED", running, running)
    canceled = copy.deepcopy(running)
    canceled["metadata"]["resourceVersion"] = "2"
    canceled["spec"] = {"status": "TaskRunCancelled"}  # our own cancel patch
    assert not run_wakes("MODIFIED", canceled, running)
    assert run_wakes("DELETED", running, running)  # row 16: TaskRunIsMissing
    assert not run_wakes("DELETED", taskrun(completionTime="t"), None)


def test_a_finished_run_of_the_initial_list_or_a_resync_queues_nothing() -> None:
    """After a restart, the finished TaskRuns listed (one per finished BuildRun) queue no
    reconcile: their BuildRuns' own listing covers what they could tell. A running one
    still does (its BuildRun may be finished: row 1 stops it)."""
    done = taskrun(conditions=cond("True", "Succeeded"), completionTime="t")
    running = taskrun(conditions=cond("Unknown", "Running"))
    assert not run_wakes("ADDED", done, None, initial=True)
    assert not run_wakes("MODIFIED", done, done)  # resync
    assert run_wakes("ADDED", running, None, initial=True)
    assert run_wakes("MODIFIED", running, running)
    assert run_wakes("ADDED", done, None)  # created finished while we watch: news

"""Every row of the BuildRun state table, without a server."""

from __future__ import annotations

import pytest

from controller.buildrun import reasons
from controller.buildrun.states import TABLE, Action, Observation, Phase, decide
from controller.buildrun.status import Outcome
from controller.runtime.errors import UserError

SUCCESS = Outcome("True", reasons.SUCCEEDED, "done", None, "sha256:1")
FAILURE = Outcome("False", reasons.FAILED, "boom", {"reason": "Failed"}, None)
USER = UserError(reasons.BUILD_NOT_FOUND, "Build 'x' not found")

CASES = [
    # (row, observation, action, reason)
    (1, Observation(Phase.DONE, taskrun_running=True, ttl_passed=True), Action.STOP_TASKRUN, ""),
    (2, Observation(Phase.DONE, ttl_passed=True), Action.DELETE, ""),
    (3, Observation(Phase.DONE, outcome=SUCCESS, canceled=True, deadline_passed=True),
     Action.NOTHING, ""),
    (3, Observation(Phase.DONE, taskrun_missing=True), Action.NOTHING, ""),
    (4, Observation(Phase.NEW, canceled=True, user_error=USER), Action.FINISH,
     reasons.BUILD_RUN_CANCELED),
    (5, Observation(Phase.NEW, user_error=USER), Action.FINISH, reasons.BUILD_NOT_FOUND),
    (6, Observation(Phase.NEW), Action.START, ""),
    (7, Observation(Phase.RUNNING, outcome=SUCCESS, canceled=True, deadline_passed=True),
     Action.FINISH, reasons.SUCCEEDED),
    (7, Observation(Phase.RUNNING, outcome=FAILURE), Action.FINISH, reasons.FAILED),
    (8, Observation(Phase.RUNNING, taskrun_missing=True, canceled=True), Action.FINISH,
     reasons.TASK_RUN_IS_MISSING),
    (9, Observation(Phase.RUNNING, canceled=True, deadline_passed=True, taskrun_running=True),
     Action.FINISH, reasons.BUILD_RUN_CANCELED),
    (10, Observation(Phase.RUNNING, deadline_passed=True, taskrun_running=True), Action.FINISH,
     reasons.BUILD_RUN_TIMEOUT),
    (11, Observation(Phase.RUNNING, taskrun_running=True), Action.PROGRESS, ""),
]


@pytest.mark.parametrize(("row", "obs", "action", "reason"), CASES)
def test_row(row: int, obs: Observation, action: Action, reason: str) -> None:
    decision = decide(obs)
    assert (decision.row, decision.action, decision.reason) == (row, action, reason)


def test_every_row_is_covered_and_numbered_in_order() -> None:
    assert [r.number for r in TABLE] == list(range(1, len(TABLE) + 1))
    assert {c[0] for c in CASES} == {r.number for r in TABLE}


def test_outcome_carries_its_status() -> None:
    assert decide(Observation(Phase.RUNNING, outcome=SUCCESS)).succeeded == "True"
    assert decide(Observation(Phase.RUNNING, outcome=SUCCESS)).from_taskrun
    assert decide(Observation(Phase.RUNNING, outcome=FAILURE)).succeeded == "False"
    assert decide(Observation(Phase.RUNNING, deadline_passed=True)).succeeded == "False"


def test_done_never_writes_status() -> None:
    """Whatever is observed, a DONE BuildRun gets no FINISH/START/PROGRESS."""
    for canceled in (False, True):
        for deadline in (False, True):
            for outcome in (None, SUCCESS, FAILURE):
                for running in (False, True):
                    d = decide(Observation(Phase.DONE, canceled=canceled,
                                           deadline_passed=deadline, outcome=outcome,
                                           taskrun_running=running))
                    assert d.action in (Action.NOTHING, Action.STOP_TASKRUN, Action.DELETE)

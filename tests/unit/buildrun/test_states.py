"""Every row of the BuildRun state table, without a server."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.outcomes import Outcome
from controller.buildrun.states import TABLE, Action, Observation, Phase, decide
from controller.runtime.errors import RetryableError, UserError

SUCCESS = Outcome("True", reasons.SUCCEEDED, "done", None, "sha256:1")
FAILURE = Outcome("False", reasons.FAILED, "boom", {"reason": "Failed"}, None)
USER = UserError(reasons.BUILD_NOT_FOUND, "Build 'x' not found")
WEBHOOK = RetryableError("webhook", "failed calling webhook \"x\": timeout")

CASES = [
    # (row, observation, action, reason)
    (1, Observation(Phase.DONE, run_running=True, ttl_passed=True), Action.STOP_RUN, ""),
    (2, Observation(Phase.DONE, ttl_passed=True), Action.DELETE, ""),
    (4, Observation(Phase.DONE, outcome=SUCCESS, canceled=True, deadline_passed=True),
     Action.NOTHING, ""),
    (4, Observation(Phase.DONE, run_missing=True), Action.NOTHING, ""),
    (3, Observation(Phase.DONE, generated_sa_left=True, run_missing=True),
     Action.DELETE_SERVICE_ACCOUNT, ""),
    (1, Observation(Phase.DONE, generated_sa_left=True, run_running=True),
     Action.STOP_RUN, ""),
    (2, Observation(Phase.DONE, generated_sa_left=True, ttl_passed=True), Action.DELETE, ""),
    (5, Observation(Phase.NEW, unrecorded_run=True, retries_exhausted=WEBHOOK), Action.ADOPT,
     ""),
    (5, Observation(Phase.NEW, unrecorded_run=True, canceled=True, user_error=USER),
     Action.ADOPT, ""),
    (6, Observation(Phase.NEW, retries_exhausted=WEBHOOK), Action.FINISH,
     reasons.RECONCILER_RETRIES_EXHAUSTED),
    (6, Observation(Phase.NEW, retries_exhausted=WEBHOOK, canceled=True, user_error=USER),
     Action.FINISH, reasons.RECONCILER_RETRIES_EXHAUSTED),
    (7, Observation(Phase.NEW, canceled=True, user_error=USER), Action.FINISH,
     reasons.BUILD_RUN_CANCELED),
    (8, Observation(Phase.NEW, user_error=USER), Action.FINISH, reasons.BUILD_NOT_FOUND),
    (9, Observation(Phase.NEW, build_unregistered=True), Action.NOTHING, ""),
    (7, Observation(Phase.NEW, build_unregistered=True, canceled=True), Action.FINISH,
     reasons.BUILD_RUN_CANCELED),
    (6, Observation(Phase.NEW, build_unregistered=True, retries_exhausted=WEBHOOK),
     Action.FINISH, reasons.RECONCILER_RETRIES_EXHAUSTED),
    (10, Observation(Phase.NEW, superseded_by="b", serial_behind="a",
                     run_policy="SerialLatestOnly"), Action.FINISH, reasons.BUILD_RUN_CANCELED),
    (8, Observation(Phase.NEW, user_error=USER, superseded_by="b"), Action.FINISH,
     reasons.BUILD_NOT_FOUND),
    (7, Observation(Phase.NEW, canceled=True, serial_behind="a"), Action.FINISH,
     reasons.BUILD_RUN_CANCELED),
    (11, Observation(Phase.NEW, serial_behind="a", run_policy="Serial"), Action.WAIT,
     reasons.SERIAL_RUN_WAITING),
    (9, Observation(Phase.NEW, build_unregistered=True, serial_behind="a"), Action.NOTHING, ""),
    (12, Observation(Phase.NEW), Action.START, ""),
    (13, Observation(Phase.RUNNING, outcome=FAILURE, infrastructure_failure="PodEvicted",
                     deadline_passed=True), Action.RETRY, "PodEvicted"),
    # Never for a canceled BuildRun, nor once the retry budget is spent: the run's outcome.
    (14, Observation(Phase.RUNNING, outcome=FAILURE, infrastructure_failure="PodEvicted",
                     canceled=True), Action.FINISH, reasons.FAILED),
    (14, Observation(Phase.RUNNING, outcome=FAILURE, infrastructure_failure="PodEvicted",
                     retries_exhausted=WEBHOOK), Action.FINISH, reasons.FAILED),
    (14, Observation(Phase.RUNNING, outcome=SUCCESS, canceled=True, deadline_passed=True),
     Action.FINISH, reasons.SUCCEEDED),
    (14, Observation(Phase.RUNNING, outcome=FAILURE, retries_exhausted=WEBHOOK), Action.FINISH,
     reasons.FAILED),
    (15, Observation(Phase.RUNNING, retries_exhausted=WEBHOOK, run_running=True),
     Action.FINISH, reasons.RECONCILER_RETRIES_EXHAUSTED),
    (15, Observation(Phase.RUNNING, retries_exhausted=WEBHOOK, run_missing=True,
                     canceled=True, deadline_passed=True),
     Action.FINISH, reasons.RECONCILER_RETRIES_EXHAUSTED),
    (16, Observation(Phase.RUNNING, run_missing=True, canceled=True), Action.FINISH,
     reasons.TASK_RUN_IS_MISSING),
    (17, Observation(Phase.RUNNING, canceled=True, cancel_unconfirmed=True,
                     deadline_passed=True, run_running=True),
     Action.FINISH, reasons.BUILD_RUN_CANCELED),
    (18, Observation(Phase.RUNNING, canceled=True, deadline_passed=True, run_running=True),
     Action.CANCEL, ""),
    (18, Observation(Phase.RUNNING, canceled=True, pod_outcome=SUCCESS, run_running=True),
     Action.CANCEL, ""),
    (17, Observation(Phase.RUNNING, canceled=True, cancel_unconfirmed=True, pod_outcome=SUCCESS,
                     run_running=True), Action.FINISH, reasons.SUCCEEDED),
    (19, Observation(Phase.RUNNING, deadline_passed=True, pod_outcome=SUCCESS,
                     run_running=True), Action.FINISH, reasons.SUCCEEDED),
    (19, Observation(Phase.RUNNING, deadline_passed=True, run_running=True), Action.FINISH,
     reasons.BUILD_RUN_TIMEOUT),
    (19, Observation(Phase.RUNNING, deadline_passed=True, cancel_unconfirmed=True,
                     run_running=True), Action.FINISH, reasons.BUILD_RUN_TIMEOUT),
    # The pending deadline (ours, off by default): after the cancel and the timeout
    # backstop, before the run's progress.
    (20, Observation(Phase.RUNNING, pending_deadline_passed=True, run_running=True),
     Action.FINISH, reasons.BUILD_RUN_PENDING_TIMEOUT),
    (19, Observation(Phase.RUNNING, pending_deadline_passed=True, deadline_passed=True,
                     run_running=True), Action.FINISH, reasons.BUILD_RUN_TIMEOUT),
    (18, Observation(Phase.RUNNING, pending_deadline_passed=True, canceled=True,
                     run_running=True), Action.CANCEL, ""),
    (14, Observation(Phase.RUNNING, pending_deadline_passed=True, outcome=FAILURE),
     Action.FINISH, reasons.FAILED),
    (21, Observation(Phase.RUNNING, run_running=True), Action.PROGRESS, ""),
]


@pytest.mark.parametrize(("row", "obs", "action", "reason"), CASES)
def test_row(row: int, obs: Observation, action: Action, reason: str) -> None:
    decision = decide(obs)
    assert (decision.row, decision.action, decision.reason) == (row, action, reason)


def test_every_row_is_covered_and_numbered_in_order() -> None:
    assert [r.number for r in TABLE] == list(range(1, len(TABLE) + 1))
    assert {c[0] for c in CASES} == {r.number for r in TABLE}


def test_every_phase_ends_in_a_catch_all_row() -> None:
    for phase in Phase:
        last = [r for r in TABLE if r.phase is phase][-1]
        assert last.guard(Observation(phase)), phase


def test_outcome_carries_its_status() -> None:
    assert decide(Observation(Phase.RUNNING, outcome=SUCCESS)).succeeded == "True"
    assert decide(Observation(Phase.RUNNING, outcome=SUCCESS)).outcome == SUCCESS
    assert decide(Observation(Phase.RUNNING, outcome=FAILURE)).succeeded == "False"
    assert decide(Observation(Phase.RUNNING, deadline_passed=True)).succeeded == "False"
    assert decide(Observation(Phase.RUNNING, deadline_passed=True)).outcome is None


def test_the_pending_deadline_finishes_with_its_message_as_our_verdict() -> None:
    d = decide(Observation(Phase.RUNNING, pending_deadline_passed=True, run_running=True,
                           pending_message="BuildRun br did not start running within 1m0s"))
    assert (d.action, d.succeeded, d.outcome) == (Action.FINISH, "False", None)
    assert d.message == "BuildRun br did not start running within 1m0s"


def test_giving_up_names_the_last_error() -> None:
    for phase in (Phase.NEW, Phase.RUNNING):
        d = decide(Observation(phase, retries_exhausted=WEBHOOK))
        assert (d.succeeded, d.outcome) == ("False", None)
        assert d.message == ("gave up after repeated system errors; last error: "
                             "failed calling webhook \"x\": timeout")


def _flags(names: tuple[str, ...], values: tuple[bool, ...]) -> dict[str, Any]:
    return dict(zip(names, values, strict=True))


def _observations(phase: Phase) -> list[Observation]:
    """Every combination of the observed facts, in one phase."""
    flags = ("canceled", "deadline_passed", "run_missing", "run_running", "ttl_passed",
             "build_unregistered", "generated_sa_left", "unrecorded_run",
             "cancel_unconfirmed", "pending_deadline_passed")
    return [
        replace(Observation(phase), **_flags(flags, values), outcome=outcome,
                user_error=user_error, retries_exhausted=exhausted, pod_outcome=pod_outcome)
        for values in itertools.product((False, True), repeat=len(flags))
        for outcome in (None, SUCCESS, FAILURE)
        for user_error in (None, USER)
        for exhausted in (None, WEBHOOK)
        for pod_outcome in (None, SUCCESS)
    ]


def test_done_never_writes_status() -> None:
    """Whatever is observed, a DONE BuildRun gets no FINISH/START/PROGRESS."""
    for obs in _observations(Phase.DONE):
        assert decide(obs).action in (Action.NOTHING, Action.STOP_RUN, Action.DELETE,
                                      Action.DELETE_SERVICE_ACCOUNT), obs


def test_a_run_that_exists_decides_then_the_spent_budget() -> None:
    """Before DONE, a run that exists comes first: an unrecorded one of a NEW BuildRun is
    recorded (the RUNNING rows then follow it), a finished one's outcome beats everything
    else observed (its work is done, so it is reported); a spent retry budget beats
    everything but those. The controller's own verdicts (a cancel before start, a user
    error, the budget) are for a NEW BuildRun of which no run exists."""
    for obs in _observations(Phase.NEW):
        d = decide(obs)
        if obs.unrecorded_run:
            assert d.action is Action.ADOPT, obs
        elif obs.retries_exhausted is not None:
            assert d.reason == reasons.RECONCILER_RETRIES_EXHAUSTED, obs
        else:
            assert d.reason != reasons.RECONCILER_RETRIES_EXHAUSTED, obs
    for obs in _observations(Phase.RUNNING):
        d = decide(obs)
        if obs.outcome is not None:
            assert (d.action, d.outcome) == (Action.FINISH, obs.outcome), obs
        elif obs.retries_exhausted is not None:
            assert d.reason == reasons.RECONCILER_RETRIES_EXHAUSTED, obs
        else:
            assert d.reason != reasons.RECONCILER_RETRIES_EXHAUSTED, obs


def test_a_cancel_waits_for_the_run_but_for_the_backstop() -> None:
    """A running BuildRun's cancel finishes it only through the run's own end (row 14)
    or the backstop (row 17): otherwise it is shown, never written as the outcome."""
    for obs in _observations(Phase.RUNNING):
        d = decide(obs)
        if (obs.canceled and obs.outcome is None and obs.retries_exhausted is None
                and not obs.run_missing):
            assert d.action is Action.CANCEL or d.row == 17, obs
            assert d.row != 17 or obs.cancel_unconfirmed, obs


def test_a_completed_pod_is_never_reported_failed_by_a_backstop() -> None:
    """A pod that completed (its image pushed) while Tekton has not said so: the cancel
    and timeout backstops report its success, never a failure."""
    for obs in _observations(Phase.RUNNING):
        d = decide(obs)
        if obs.pod_outcome is not None and d.row in (17, 19):
            assert (d.succeeded, d.outcome) == ("True", obs.pod_outcome), obs


@pytest.mark.parametrize("kind", ["TaskRun", "PipelineRun"])
def test_a_missing_executor_is_named_by_its_kind(kind: str) -> None:
    """Row 16 is TaskRunIsMissing for both executors (Shipwright's one reason); the
    message says which was deleted."""
    decision = decide(Observation(Phase.RUNNING, run_missing=True, executor_kind=kind))
    assert (decision.row, decision.reason, decision.message) == (
        16, reasons.TASK_RUN_IS_MISSING, f"the {kind} was deleted before it finished")


def test_a_serial_build_s_messages_name_the_buildrun() -> None:
    """Row 10 names the newer BuildRun that superseded the waiting one, row 11 the one it
    waits behind (Unknown: it has not started, it has not failed)."""
    superseded = decide(Observation(Phase.NEW, superseded_by="app-3",
                                    run_policy="SerialLatestOnly"))
    assert (superseded.succeeded, superseded.message) == (
        "False", "superseded by the newer BuildRun app-3 (the Build's run policy is "
        "SerialLatestOnly); canceled before it started")
    waiting = decide(Observation(Phase.NEW, serial_behind="app-1", run_policy="Serial"))
    assert (waiting.succeeded, waiting.message) == (
        "Unknown", "the Build's run policy is Serial: waiting for BuildRun app-1 to finish")

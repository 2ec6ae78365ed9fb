"""The BuildRun state machine, as a table.

A BuildRun is in one of three phases, read off its status:

- NEW:     no completionTime, no taskRunName (nothing started yet)
- RUNNING: no completionTime, taskRunName set (a TaskRun exists)
- DONE:    completionTime set. The outcome is frozen: no row below ever
           writes the status of a DONE BuildRun (the CRD's validation
           rules also make the API server refuse such a write).

The reconciler observes the world (I/O), `decide` picks the first row of
TABLE whose phase and guard match (pure), and the reconciler carries out the
row's action (I/O). System errors (timeouts, 5xx, conflicts, webhooks) are
not rows: they raise out of the reconciler before any status is written, the
queue retries with exponential backoff, and when the retry budget is spent
`give_up` finishes the BuildRun with ReconcilerRetriesExhausted (after
taking a finished TaskRun's own outcome, if it has one).

Whenever a BuildRun finishes while its TaskRun still runs, the TaskRun is
cancelled after the status is written; DONE row 1 repeats that until it
sticks, so no image is built for a BuildRun that says Failed. The only other
thing that happens to a DONE BuildRun is its deletion when its retention
TTL runs out (row 2); the reconciler wakes exactly then (requeue-after).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from controller.buildrun import reasons
from controller.buildrun.status import Outcome
from controller.runtime.errors import UserError


class Phase(enum.Enum):
    NEW = "New"
    RUNNING = "Running"
    DONE = "Done"


class Action(enum.Enum):
    NOTHING = "nothing"
    STOP_TASKRUN = "cancel the TaskRun if it still runs; status unchanged"
    DELETE = "delete the BuildRun (retention TTL), preconditioned on uid and resourceVersion"
    START = ("create the TaskRun (adopt it on AlreadyExists), write its Pending/Running "
             "condition, requeue at deadline")
    FINISH = "write the terminal status, then cancel the TaskRun if it still runs"
    PROGRESS = "write Pending/Running if it changed, requeue at the deadline"


@dataclass(frozen=True)
class Observation:
    phase: Phase
    canceled: bool = False
    deadline_passed: bool = False
    # NEW only: the user error found while resolving Build, strategy, params, SA.
    user_error: UserError | None = None
    # RUNNING/DONE: the TaskRun's terminal outcome, if it has one.
    outcome: Outcome | None = None
    taskrun_missing: bool = False
    taskrun_running: bool = False
    # DONE: the retention TTL (ttlAfterSucceeded/ttlAfterFailed) has run out.
    ttl_passed: bool = False


@dataclass(frozen=True)
class Decision:
    row: int
    action: Action
    reason: str = ""
    message: str = ""
    succeeded: str = "False"
    # FINISH with the TaskRun's own outcome (failure details, digest).
    from_taskrun: bool = False


@dataclass(frozen=True)
class Row:
    number: int
    phase: Phase
    when: str
    guard: Callable[[Observation], bool]
    decide: Callable[[Observation], Decision]


def _finish(row: int, reason: str, message: str) -> Callable[[Observation], Decision]:
    return lambda _: Decision(row, Action.FINISH, reason, message)


def _finish_with_user_error(o: Observation) -> Decision:
    assert o.user_error is not None
    return Decision(5, Action.FINISH, o.user_error.reason, o.user_error.message)


def _finish_with_outcome(o: Observation) -> Decision:
    assert o.outcome is not None
    return Decision(7, Action.FINISH, o.outcome.reason, o.outcome.message, o.outcome.status,
                    from_taskrun=True)


TABLE: tuple[Row, ...] = (
    Row(1, Phase.DONE, "TaskRun still running", lambda o: o.taskrun_running,
        lambda _: Decision(1, Action.STOP_TASKRUN)),
    Row(2, Phase.DONE, "retention TTL ran out", lambda o: o.ttl_passed,
        lambda _: Decision(2, Action.DELETE)),
    Row(3, Phase.DONE, "anything else (wake again at the TTL, if any)", lambda _: True,
        lambda _: Decision(3, Action.NOTHING)),
    Row(4, Phase.NEW, "spec.state is BuildRunCanceled", lambda o: o.canceled,
        _finish(4, reasons.BUILD_RUN_CANCELED, "the BuildRun was canceled before it started")),
    Row(5, Phase.NEW, "user error (Build/strategy/SA missing, bad params, timeout, ref)",
        lambda o: o.user_error is not None, _finish_with_user_error),
    Row(6, Phase.NEW, "everything resolves", lambda _: True,
        lambda _: Decision(6, Action.START)),
    # A finished TaskRun wins over cancel and timeout: its work is done, report it.
    Row(7, Phase.RUNNING, "TaskRun finished", lambda o: o.outcome is not None,
        _finish_with_outcome),
    Row(8, Phase.RUNNING, "TaskRun deleted before it finished", lambda o: o.taskrun_missing,
        _finish(8, reasons.TASK_RUN_IS_MISSING, "the TaskRun was deleted before it finished")),
    Row(9, Phase.RUNNING, "spec.state is BuildRunCanceled", lambda o: o.canceled,
        _finish(9, reasons.BUILD_RUN_CANCELED, "the BuildRun was canceled")),
    Row(10, Phase.RUNNING, "timeout deadline passed", lambda o: o.deadline_passed,
        _finish(10, reasons.BUILD_RUN_TIMEOUT, "the BuildRun ran past its timeout")),
    Row(11, Phase.RUNNING, "TaskRun in progress", lambda _: True,
        lambda _: Decision(11, Action.PROGRESS)),
)


def decide(observation: Observation) -> Decision:
    for row in TABLE:
        if row.phase is observation.phase and row.guard(observation):
            return row.decide(observation)
    raise AssertionError(f"no row for {observation}")  # every phase ends in a catch-all row

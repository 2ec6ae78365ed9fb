"""The BuildRun state machine, as a table.

A BuildRun is in one of three phases, read off its status:

- NEW:     no completionTime, no taskRunName or executor (nothing started yet)
- RUNNING: no completionTime, taskRunName or executor set (a TaskRun exists)
- DONE:    completionTime set. The outcome is frozen: no row below ever
           writes the status of a DONE BuildRun (the CRD's validation
           rules also make the API server refuse such a write).

The reconciler observes the world (I/O), `decide` picks the first row of
TABLE whose phase and guard match (pure), and the reconciler carries out the
row's action (I/O). TABLE is the whole machine: every status the controller
writes is some row's decision, and every phase ends in a catch-all row, so
`decide` answers for any observation.

System errors (timeouts, 5xx, conflicts, webhooks) raise out of the
reconciler before any status is written and the queue retries with
exponential backoff. When the retry budget is spent the reconciler observes
once more, with `retries_exhausted` set to the last error, and the table
decides as for any other observation: a run that exists comes first (row 5
records an unrecorded one; row 14 reports a finished one's outcome), so a built
image is never reported as a failure; otherwise rows 6 and 15 finish with
ReconcilerRetriesExhausted.

A run's own end decides the outcome whenever a run exists. A NEW BuildRun of which a
run exists that its status does not record (an earlier try made it and died before
saying so, or Shipwright's controller did) first records it (row 5), and the RUNNING
rows follow it from there. A cancel of a running BuildRun asks the run to stop and
shows Unknown/BuildRunCanceled (row 18) until the run reports: cancelled, or, when it
completed before the request could be processed, its success and image (row 14), as
Shipwright does; only a run that never confirms the cancel is ended by a backstop
(row 17), like the timeout's (row 19).

A run that has not started running shows Tekton's reason (row 21; its pod's words
where it cannot be scheduled or pull an image) and, only when a pending timeout is set
(--pending-timeout, the annotation), is ended BuildRunPendingTimeout once it has waited
that long (row 20).

Whenever a BuildRun finishes while its TaskRun still runs (the backstops, the pending
deadline, a spent retry budget), the TaskRun is cancelled after the status is written; DONE row 1
repeats that until it sticks. Once the TaskRun has stopped, a ServiceAccount
generated for the BuildRun is deleted (row 3). The only other thing that happens to
a DONE BuildRun is its deletion when its retention TTL runs out (row 2); the
reconciler wakes exactly then (requeue-after).

A NEW BuildRun of a Build that Shipwright's Build controller has not validated
yet waits (row 9): nothing is written, nothing is retried, and the Build's
status write wakes it through the Build informer.

"TaskRun" here means what the BuildRun runs as, its executor: a TaskRun, or with
BUILDRUN_EXECUTOR=PipelineRun a PipelineRun (executors.py). The rows are the same for both.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from controller.buildrun import reasons
from controller.buildrun.outcomes import Outcome
from controller.runtime.errors import RetryableError, UserError
from controller.shipwright.resources import TASKRUNS


class Phase(enum.Enum):
    NEW = "New"
    RUNNING = "Running"
    DONE = "Done"


class Action(enum.Enum):
    NOTHING = "nothing"
    STOP_RUN = "cancel the TaskRun if it still runs; status unchanged"
    DELETE = "delete the BuildRun (retention TTL), preconditioned on uid and resourceVersion"
    START = ("create the TaskRun (adopt it on AlreadyExists), write its progress "
             "condition (Tekton's reason), requeue at the timeout backstop")
    FINISH = "write the terminal status, then cancel the TaskRun if it still runs"
    PROGRESS = ("write Tekton's reason and message, or why its pod waits (and the "
                "TaskRun's startTime), if their meaning changed; requeue at the timeout "
                "backstop or the pending deadline")
    DELETE_SERVICE_ACCOUNT = ("delete the ServiceAccount generated for the BuildRun "
                              "(preconditioned on its uid)")
    ADOPT = ("record the run in the status (with the build spec snapshot, when the BuildRun "
             "resolves) and its progress; the RUNNING rows follow it from there")
    CANCEL = ("show the cancel (Unknown/BuildRunCanceled) and ask the run to stop, unless "
              "its pod has completed already; wake at the cancel backstop")
    RETRY = ("record the failed attempt on the BuildRun (annotation, Event, metric), then, "
             "once its backoff has passed, create the next attempt's TaskRun (adopt it on "
             "AlreadyExists) and record it in the status (Pending, no completionTime)")
    AWAIT_POD = ("nothing yet: the pod of a TaskRun cancelled as asked is still ending (a "
                 "build that ends now has pushed its image); its events wake the BuildRun, "
                 "--timeout-grace after the TaskRun ended at the latest")
    WAIT = ("write Unknown/SerialRunWaiting naming the BuildRun it waits behind, if that "
            "changed; the end of the one ahead wakes it")


@dataclass(frozen=True)
class Observation:
    """What one reconcile saw; the only input of `decide`.

    A field a phase's rows do not read may be left at its default.
    """

    phase: Phase
    canceled: bool = False
    # NEW: a run of the BuildRun exists that its status does not record (row 5).
    unrecorded_run: bool = False
    # RUNNING, canceled: the cancel was asked --timeout-grace ago and the run has not
    # ended (buildruns.cancel_left: from the cancel condition's lastTransitionTime).
    cancel_unconfirmed: bool = False
    # RUNNING, canceled or past a backstop: the outcome the run's pod shows when it has
    # completed (every container exited 0) though Tekton has not said so
    # (status.completed_pod_outcome): the build is done, its image pushed, so a cancel is
    # not sent on, and a backstop reports this, not a failure.
    pod_outcome: Outcome | None = None
    # RUNNING: the timeout backstop passed (buildruns.deadline_left: the run's timeout
    # plus --timeout-grace, from its start).
    deadline_passed: bool = False
    # RUNNING, when the deadline passed: BuildRunTimeout's message (outcomes.timeout_message).
    timeout_message: str = ""
    # RUNNING: the pending deadline passed, the run never reported Running
    # (buildruns.pending_left: --pending-timeout or the annotation, from the run's
    # creation), and BuildRunPendingTimeout's message (outcomes.pending_timeout_message).
    pending_deadline_passed: bool = False
    pending_message: str = ""
    # NEW only: the user error found while resolving Build, strategy, params, SA.
    user_error: UserError | None = None
    # NEW only: the referenced Build has no status.registered yet (its validation has not
    # run); the Build informer wakes the BuildRun when the Build's status changes.
    build_unregistered: bool = False
    # RUNNING: the recorded TaskRun's terminal outcome, if it finished.
    outcome: Outcome | None = None
    # RUNNING, the TaskRun ended cancelled as asked: its pod is still on its way out, a
    # container running (caches.ending), within --timeout-grace of the TaskRun's end. Its
    # end tells whether the build finished meanwhile (status.completed_pod_outcome).
    pod_ending: bool = False
    run_missing: bool = False
    # RUNNING: the finished run failed for the infrastructure (retries.infrastructure_failure:
    # its reason), infrastructure retries are asked for and attempts are left, the
    # BuildRun is not canceled and its retry budget is not spent; "" otherwise.
    infrastructure_failure: str = ""
    run_running: bool = False
    # DONE: the retention TTL (ttlAfterSucceeded/ttlAfterFailed) has run out.
    ttl_passed: bool = False
    # DONE: the ServiceAccount generated for the BuildRun (`.generate`) still exists.
    generated_sa_left: bool = False
    # NEW/RUNNING: the retry budget is spent; the last system error, for the message.
    retries_exhausted: RetryableError | None = None
    # What the BuildRun runs as ("TaskRun" or "PipelineRun"), for the messages only.
    executor_kind: str = TASKRUNS.kind
    # NEW, of a Build with a serial run policy (serial.py; its value here, for the
    # messages): the newer waiting BuildRun that supersedes this one (SerialLatestOnly,
    # row 10), else the BuildRun it waits behind (row 11); "" when it may start.
    run_policy: str = ""
    superseded_by: str = ""
    serial_behind: str = ""


@dataclass(frozen=True)
class Decision:
    """A row's verdict. reason/message/succeeded are the Succeeded condition a FINISH
    writes; `outcome` is set when the TaskRun's own outcome is written (its failure
    details and digest go into the status too). `row` is the number of the row that
    decided; `decide` sets it."""

    action: Action
    reason: str = ""
    message: str = ""
    succeeded: str = "False"
    outcome: Outcome | None = None
    row: int = 0


@dataclass(frozen=True)
class Row:
    """`when` is the guard in words; README.md's row table shows it (tests/test_docs.py)."""

    number: int
    phase: Phase
    when: str
    guard: Callable[[Observation], bool]
    decide: Callable[[Observation], Decision]


def _just(action: Action) -> Callable[[Observation], Decision]:
    return lambda _: Decision(action)


def _finish(reason: str, message: str) -> Callable[[Observation], Decision]:
    return lambda _: Decision(Action.FINISH, reason, message)


def _finish_with_user_error(o: Observation) -> Decision:
    assert o.user_error is not None
    return Decision(Action.FINISH, o.user_error.reason, o.user_error.message)


def _finish_with_outcome(o: Observation) -> Decision:
    assert o.outcome is not None
    if o.pod_ending:
        return Decision(Action.AWAIT_POD)
    return with_outcome(o.outcome)


def with_outcome(outcome: Outcome) -> Decision:
    """The FINISH that writes the run's own outcome (its condition, details, digest)."""
    return Decision(Action.FINISH, outcome.reason, outcome.message, outcome.status,
                    outcome=outcome)


def _cancel_unconfirmed(o: Observation) -> Decision:
    if o.pod_outcome is not None:
        return with_outcome(o.pod_outcome)
    return Decision(Action.FINISH, reasons.BUILD_RUN_CANCELED,
                    f"the BuildRun was canceled; its {o.executor_kind} did not confirm the "
                    "cancel within --timeout-grace")


def _timed_out(o: Observation) -> Decision:
    if o.pod_outcome is not None:
        return with_outcome(o.pod_outcome)
    return Decision(Action.FINISH, reasons.BUILD_RUN_TIMEOUT, o.timeout_message)


def _pending_timed_out(o: Observation) -> Decision:
    return Decision(Action.FINISH, reasons.BUILD_RUN_PENDING_TIMEOUT, o.pending_message)


def _executor_missing(o: Observation) -> Decision:
    return Decision(Action.FINISH, reasons.TASK_RUN_IS_MISSING,
                    f"the {o.executor_kind} was deleted before it finished")


def _superseded(o: Observation) -> Decision:
    return Decision(Action.FINISH, reasons.BUILD_RUN_CANCELED,
                    f"superseded by the newer BuildRun {o.superseded_by} (the Build's run "
                    f"policy is {o.run_policy}); canceled before it started")


def _wait_behind(o: Observation) -> Decision:
    return Decision(Action.WAIT, reasons.SERIAL_RUN_WAITING,
                    f"the Build's run policy is {o.run_policy}: waiting for BuildRun "
                    f"{o.serial_behind} to finish", succeeded="Unknown")


def _give_up(o: Observation) -> Decision:
    assert o.retries_exhausted is not None
    return Decision(Action.FINISH, reasons.RECONCILER_RETRIES_EXHAUSTED,
                    f"gave up after repeated system errors; last error: "
                    f"{o.retries_exhausted.message}")


def _finished(o: Observation) -> bool:
    return o.outcome is not None


def _infrastructure_retry(o: Observation) -> bool:
    """Row 13: never a cancel's run nor once the retry budget is spent (the run's outcome,
    row 14), whatever the observer found."""
    return (bool(o.infrastructure_failure) and o.outcome is not None and not o.canceled
            and o.retries_exhausted is None)


def _budget_spent(o: Observation) -> bool:
    return o.retries_exhausted is not None


TABLE: tuple[Row, ...] = (
    Row(1, Phase.DONE, "TaskRun still running", lambda o: o.run_running,
        _just(Action.STOP_RUN)),
    Row(2, Phase.DONE, "retention TTL ran out", lambda o: o.ttl_passed,
        _just(Action.DELETE)),
    # As Shipwright: the generated ServiceAccount goes once the TaskRun has stopped.
    Row(3, Phase.DONE, "generated ServiceAccount left", lambda o: o.generated_sa_left,
        _just(Action.DELETE_SERVICE_ACCOUNT)),
    Row(4, Phase.DONE, "anything else (wake again at the TTL, if any)", lambda _: True,
        _just(Action.NOTHING)),
    # A run that exists decides, whatever else is true: recorded first, then followed.
    Row(5, Phase.NEW, "a TaskRun of it exists that its status does not record",
        lambda o: o.unrecorded_run, _just(Action.ADOPT)),
    Row(6, Phase.NEW, "retry budget spent", _budget_spent, _give_up),
    Row(7, Phase.NEW, "spec.state is BuildRunCanceled", lambda o: o.canceled,
        _finish(reasons.BUILD_RUN_CANCELED, "the BuildRun was canceled before it started")),
    Row(8, Phase.NEW, "user error (Build/strategy/SA missing, bad params, timeout, ref)",
        lambda o: o.user_error is not None, _finish_with_user_error),
    # Never a failure and never a retry: Shipwright's Build controller has not validated
    # the Build yet. Its status write wakes the BuildRun (the Build informer).
    Row(9, Phase.NEW, "Build not validated yet (no status.registered)",
        lambda o: o.build_unregistered, _just(Action.NOTHING)),
    # A Build annotated with a serial run policy (serial.py): who runs and who waits is
    # read off the caches (creationTimestamp, then name), so a restart keeps the order;
    # START checks live that no other run of the Build is going before it creates one.
    Row(10, Phase.NEW, "superseded by a newer waiting BuildRun of a SerialLatestOnly Build",
        lambda o: bool(o.superseded_by), _superseded),
    Row(11, Phase.NEW, "an earlier BuildRun of a Serial Build has not finished",
        lambda o: bool(o.serial_behind), _wait_behind),
    Row(12, Phase.NEW, "everything resolves", lambda _: True,
        _just(Action.START)),
    # A finished TaskRun's outcome first (its work is done: report it), then the spent
    # retry budget, then the rest.
    # Tekton deletes the pod of a run it cancels, and its containers run on for the grace
    # period: a build that ends then has pushed its image, so the pod's end is awaited.
    # Opt-in (retries.py): a run the infrastructure failed is run again, before any
    # outcome is written; the last attempt's outcome is the BuildRun's (row 14).
    Row(13, Phase.RUNNING, "TaskRun failed for an infrastructure reason, attempts left",
        _infrastructure_retry, lambda o: Decision(Action.RETRY, o.infrastructure_failure)),
    Row(14, Phase.RUNNING, "TaskRun finished (cancelled as asked: once its pod has ended)",
        _finished, _finish_with_outcome),
    Row(15, Phase.RUNNING, "retry budget spent", _budget_spent, _give_up),
    # TaskRunIsMissing for a PipelineRun too, as Shipwright (VerifyRequestName).
    Row(16, Phase.RUNNING, "TaskRun deleted before it finished", lambda o: o.run_missing,
        _executor_missing),
    # A backstop: Tekton ends a cancelled run itself (TaskRunCancelled: row 14); this row
    # only when it has not, --timeout-grace after the cancel was asked.
    Row(17, Phase.RUNNING, "spec.state is BuildRunCanceled, the TaskRun never confirmed "
        "the cancel", lambda o: o.canceled and o.cancel_unconfirmed, _cancel_unconfirmed),
    Row(18, Phase.RUNNING, "spec.state is BuildRunCanceled", lambda o: o.canceled,
        _just(Action.CANCEL)),
    # A backstop: Tekton ends a timed-out run itself (its TaskRunTimeout: row 14), with
    # the timeout it holds; this row only when it has not, --timeout-grace later.
    Row(19, Phase.RUNNING, "timeout plus the grace passed, Tekton never ended the TaskRun",
        lambda o: o.deadline_passed, _timed_out),
    # Ours, off unless asked for (--pending-timeout, the annotation): a run that never
    # started running (unschedulable, an image that cannot be pulled) is ended and stopped.
    Row(20, Phase.RUNNING, "pending timeout passed, the TaskRun never ran",
        lambda o: o.pending_deadline_passed, _pending_timed_out),
    Row(21, Phase.RUNNING, "TaskRun in progress", lambda _: True,
        _just(Action.PROGRESS)),
)


def decide(observation: Observation) -> Decision:
    """The decision of the first row whose phase and guard match."""
    for row in TABLE:
        if row.phase is observation.phase and row.guard(observation):
            return replace(row.decide(observation), row=row.number)
    raise AssertionError(f"no row for {observation}")  # every phase ends in a catch-all row

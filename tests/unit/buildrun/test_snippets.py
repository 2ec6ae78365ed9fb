"""The failure Event's text with a failed step's last lines (controller/buildrun/snippets.py),
without a server: which failures get lines, and the message always within the Event's
limit with the log's last lines kept. The read on the real node: tests/cluster/
test_log_snippet.py."""

from __future__ import annotations

import pytest

from controller.buildrun import reasons
from controller.buildrun.outcomes import Outcome
from controller.buildrun.snippets import (
    LINES_ROOM,
    MAX_WAITING,
    PROBLEM_MAX,
    SKIPPED,
    FailureLogs,
    _problem,
    event_message,
    failed_step,
)
from controller.buildrun.states import Action, Decision
from controller.runtime.events import MESSAGE_MAX
from controller.runtime.kube import ApiError
from controller.runtime.podlogs import ELLIPSIS, Tail
from controller.settings import LogSnippetSettings
from tests.harness import metric

STEP = "step-build"
FAILED = ("buildrun step step-build failed, for detailed information: kubectl --namespace ns "
          "logs br-pod --container=step-build")


def failure(location: dict[str, str] | None, status: str = "False") -> Decision:
    details = {"location": location} if location is not None else None
    outcome = Outcome(status, reasons.FAILED, FAILED, details, None)
    return Decision(Action.FINISH, reasons.FAILED, FAILED, status, outcome=outcome)


def test_a_failed_step_is_named_by_the_failure_details_location() -> None:
    assert failed_step(failure({"pod": "br-pod", "container": STEP})) == ("br-pod", STEP)


@pytest.mark.parametrize("decision", [
    failure({"pod": "br-pod"}),  # no failed container (evicted, unexpected)
    failure(None),
    failure({"pod": "br-pod", "container": STEP}, status="True"),
    Decision(Action.FINISH, reasons.BUILD_RUN_CANCELED, "canceled"),  # our verdict
    Decision(Action.FINISH, reasons.BUILD_NOT_FOUND, "no Build"),  # a user error
])
def test_no_step_no_lines(decision: Decision) -> None:
    assert failed_step(decision) is None


def test_the_message_then_the_lines_under_a_header() -> None:
    text = event_message(FAILED, STEP, Tail(("compiling", "error: it broke")))
    assert text == (f"{FAILED}\nLast 2 lines of step-build's log:\ncompiling\n"
                    "error: it broke")


def test_one_line_and_an_empty_log() -> None:
    assert event_message("m", STEP, Tail(("x",))).endswith("Last 1 line of step-build's log:\nx")
    assert event_message("m", STEP, Tail(())) == "m\nThe log of step-build is empty."


def test_a_read_cut_short_says_so() -> None:
    assert "the read stopped short of the log's end" in event_message(
        "m", STEP, Tail(("a",), cut=True))


def test_an_unreadable_log_says_why_briefly() -> None:
    text = event_message(FAILED, STEP, None, "404 NotFound: " + "x" * 1000)
    assert text.startswith(f"{FAILED}\nThe log of step-build could not be read: 404 NotFound: ")
    assert len(text.encode()) <= len(FAILED) + 60 + PROBLEM_MAX


def test_lines_that_do_not_fit_lose_their_first_ones_and_the_header_counts_the_rest() -> None:
    lines = tuple(f"line {i:02d} " + "x" * 90 for i in range(1, 21))  # 100 bytes each
    text = event_message(FAILED, STEP, Tail(lines))
    assert len(text.encode()) <= MESSAGE_MAX
    head, header, *shown = text.split("\n")
    assert head == FAILED
    assert shown == list(lines[-len(shown):]) and len(shown) >= 7
    assert header == f"Last {len(shown)} lines of step-build's log:"


def test_a_long_outcome_message_is_cut_to_leave_the_lines_room() -> None:
    message = "tekton said: " + "y" * 3000
    text = event_message(message, STEP, Tail(("the last line",)))
    assert len(text.encode()) <= MESSAGE_MAX
    assert text.endswith("Last 1 line of step-build's log:\nthe last line")
    assert text.split("\n")[0].endswith(ELLIPSIS)
    assert len(text.split("\n")[0].encode()) <= MESSAGE_MAX - LINES_ROOM


def test_why_there_are_no_lines_survives_a_long_outcome_message() -> None:
    text = event_message("m" * 5000, STEP, None, "404 NotFound: gone")
    assert text.endswith("\nThe log of step-build could not be read: 404 NotFound: gone")
    assert len(text.encode()) <= MESSAGE_MAX


@pytest.mark.parametrize("size", [0, 1, 500, 1023, 1024, 1025, 4000])
def test_always_within_the_events_limit_in_bytes(size: int) -> None:
    lines = tuple("€" * size for _ in range(3))
    for tail, problem in ((Tail(lines), ""), (None, "€" * size)):
        text = event_message("é" * size, "c" * min(size, 253), tail, problem)
        assert len(text.encode()) <= MESSAGE_MAX
        assert "\ufffd" not in text


def test_the_problem_in_a_few_words() -> None:
    forbidden = _problem(ApiError(403, "Forbidden", 'pods "p" is forbidden: ' + "z" * 500), 5)
    assert forbidden.startswith("the controller needs get on pods/log "
                                "(manifests/rbac/pod_logs.yaml); 403 Forbidden")
    assert _problem(ApiError(404, "NotFound", 'pods "p" not found'), 5) == \
        '404 NotFound: pods "p" not found'
    assert _problem(TimeoutError(), 2.5) == "no answer within 2.5 s"
    assert _problem(ConnectionResetError("reset"), 5) == "ConnectionResetError: reset"


async def test_past_max_waiting_reads_the_event_goes_without_lines_at_once() -> None:
    """A burst of failures never becomes an unbounded queue of kubelet reads: no read is
    made (there is no server here to make one to)."""
    logs = FailureLogs(None, LogSnippetSettings())  # type: ignore[arg-type]
    logs._waiting = MAX_WAITING
    before = metric("buildrun_failure_log_snippets_total", result=SKIPPED)
    text = await logs.message("ns", "br-pod", STEP, FAILED)
    assert text == (f"{FAILED}\nThe log of step-build could not be read: {MAX_WAITING} other "
                    "reads were waiting")
    assert metric("buildrun_failure_log_snippets_total", result=SKIPPED) - before == 1

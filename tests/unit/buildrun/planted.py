"""Bugs planted on purpose, to show the interleavings machine's promise catches real
mistakes (issue 39 part 7). Not a test (it takes minutes): run by hand,

    .venv/bin/python -m tests.unit.buildrun.planted [EXAMPLES]

For each planted bug (a monkeypatch of today's controller) it runs the machine,
derandomized as `make test` runs it, without shrinking, until the promise breaks or
EXAMPLES examples (default 2,000) have passed, and prints which invariants broke at the
first failure and after how many examples. The control, no bug planted, must pass.
docs/development.md ("The interleavings test") records the table it printed.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from controller.buildrun import observe, retries, states, status_writes
from controller.buildrun.resources import phases
from controller.runtime import conflict
from tests.unit.buildrun import test_interleavings as machine
from tests.unit.buildrun.test_interleavings import Interleavings, quiet_controller


@contextlib.contextmanager
def nothing_planted() -> Iterator[None]:
    yield


@contextlib.contextmanager
def reread_takes_a_namesake() -> Iterator[None]:
    """The uid pin dropped: a conflict's re-read takes whatever holds the name, and the
    patches no longer name the uid (issue 39 part 2 as it was)."""
    async def any_namesake(kube: Any, resource: Any, obj: Any) -> Any:
        meta = obj["metadata"]
        return await kube.get_or_none(resource, meta.get("namespace"), meta["name"])

    with mock.patch.object(conflict, "reread", any_namesake), \
            mock.patch("controller.buildrun.actions.reread", any_namesake), \
            mock.patch.object(conflict, "pinned", lambda obj, patch: patch):
        yield


@contextlib.contextmanager
def cancel_finishes_at_once() -> Iterator[None]:
    """Row 18 finishes BuildRunCanceled at once (then stops the run), as row 17's
    backstop does, instead of waiting for the run's end."""
    table = tuple(replace(row, decide=states._cancel_unconfirmed) if row.number == 18
                  else row for row in states.TABLE)
    with mock.patch.object(states, "TABLE", table):
        yield


@contextlib.contextmanager
def completion_time_from_the_clock() -> Iterator[None]:
    """completionTime is the controller's clock even when the run decided."""
    with mock.patch.object(status_writes, "run_completion", lambda run: None):
        yield


@contextlib.contextmanager
def freeze_ignored() -> Iterator[None]:
    """write_status writes on a BuildRun finished meanwhile (the re-read's DONE ignored;
    the CRD's rule, which FakeKube does not hold, would refuse it)."""
    with mock.patch.object(status_writes, "phase_of", lambda obj: states.Phase.RUNNING):
        yield


@contextlib.contextmanager
def second_run_when_not_cached() -> Iterator[None]:
    """The run's name drawn at random (as generateName would): a start that does not find
    the run in its cache makes another instead of meeting AlreadyExists."""
    counter = iter(range(10**9))
    with mock.patch.object(phases, "_suffix", lambda uid: f"r{next(counter):04d}"):
        yield


@contextlib.contextmanager
def a_builds_own_failure_retried() -> Iterator[None]:
    """Every failed run taken for the infrastructure's (issue 43 part 3): a step's own
    failure is run again."""
    with mock.patch("controller.buildrun.observe.infrastructure_failure",
                    lambda run, pod: retries.Failure("Failed", "")):
        yield


@contextlib.contextmanager
def serial_start_trusts_the_caches() -> Iterator[None]:
    """A serial Build's START does not look again under the Build's turn: what the caches
    show decides, a rival whose start they do not show yet included (issue 43)."""
    async def trusted(self: Any, seen: Any) -> Any:
        return seen

    with mock.patch.object(observe.Observer, "recheck_serial", trusted):
        yield


@contextlib.contextmanager
def retries_past_the_limit() -> Iterator[None]:
    """The BuildRun's limit ignored: ten retries whatever it asks for."""
    with mock.patch("controller.buildrun.observe.limit_of",
                    lambda buildrun, build, default: retries.Limit(10)):
        yield


@contextlib.contextmanager
def serial_runs_going_not_counted() -> Iterator[None]:
    """A serial Build's runs going (their BuildRuns finished by a backstop, or not yet
    recording them) do not hold the next BuildRun back: only the BuildRuns do."""
    original = observe.Observer.serial_rivals

    def without_runs(self: Any, buildrun: Any, executor: Any) -> Any:
        others, _ = original(self, buildrun, executor)
        return others, []

    with mock.patch.object(observe.Observer, "serial_rivals", without_runs):
        yield


PLANTED: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "none (the control)": nothing_planted,
    "re-read and patches not pinned to the uid": reread_takes_a_namesake,
    "a cancel finishes at once, not waiting for the run": cancel_finishes_at_once,
    "completionTime from the controller's clock": completion_time_from_the_clock,
    "a status write on a finished BuildRun (freeze ignored)": freeze_ignored,
    "a second TaskRun when the first is not in the cache": second_run_when_not_cached,
    "serial: START trusts the caches (no live look)": serial_start_trusts_the_caches,
    "serial: runs going not counted, only BuildRuns": serial_runs_going_not_counted,
    "a build's own failure retried": a_builds_own_failure_retried,
    "infrastructure retries past the BuildRun's limit": retries_past_the_limit,
}


class Counted(Interleavings):
    """The machine, counting its examples and keeping the first failure's message."""

    examples = 0
    first: tuple[int, str] | None = None

    def __init__(self) -> None:
        type(self).examples += 1
        super().__init__()

    def _noted(self, check: Callable[[], None]) -> None:
        try:
            check()
        except AssertionError as exc:
            if type(self).first is None:
                type(self).first = (type(self).examples, str(exc))
            raise

    @invariant()
    def promise(self) -> None:
        self._noted(super().promise)

    def liveness(self) -> None:
        self._noted(super().liveness)


def run(examples: int) -> tuple[str, str, float]:
    Counted.examples, Counted.first = 0, None
    started = time.monotonic()
    try:
        run_state_machine_as_test(Counted, settings=settings(
            max_examples=examples, stateful_step_count=machine.STEPS, deadline=None,
            derandomize=True, database=None, suppress_health_check=list(HealthCheck),
            phases=[Phase.generate], report_multiple_bugs=False))
    except AssertionError as exc:  # its steps, unshrunk, for whoever looks into it
        print("\n".join(getattr(exc, "__notes__", [])), file=sys.stderr)
    took = time.monotonic() - started
    if Counted.first is None:
        return "nothing", f"passed {Counted.examples}", took
    at, message = Counted.first
    caught = sorted(set(re.findall(r"^\(([a-g])\)", message, re.MULTILINE)))
    first_line = next(line for line in message.splitlines() if line.startswith("("))
    return ", ".join(f"({c})" for c in caught), f"{at}: {first_line[:110]}", took


def main() -> None:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    only = sys.argv[2:]  # the first words of the planted bugs to run, if given
    print("| planted bug | caught by | at example | seconds |\n|---|---|---|---|")
    with quiet_controller():
        for name, plant in PLANTED.items():
            if only and not any(name.startswith(word) for word in only):
                continue
            with plant():
                caught, detail, took = run(examples)
            at, _, first = detail.partition(": ")
            print(f"| {name} | {caught} | {at} | {took:.0f} |", flush=True)
            if first:
                print(f"|   | {first} | | |", flush=True)


if __name__ == "__main__":
    main()

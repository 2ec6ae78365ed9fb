"""Why it failed, without a second command (--failure-log-snippet, off by default): the
failed step's last log lines in the failure's Warning Event, after OpenShift's build
`logSnippet`. Shipwright's Event and status only name the `kubectl logs` command.

The log is read once per failure: after the terminal status is written (a retry of the
reconcile then finds the BuildRun done and reads nothing), in a task of the Event
recorder's (`EventRecorder.record_deferred`), so a slow kubelet holds up no worker, no
status write and no other BuildRun. A read that fails (the pod gone, RBAC, no answer in
READ_TIMEOUT seconds) changes nothing but the Event's text, which then says why there
are no lines.
"""

from __future__ import annotations

import asyncio
import logging

from controller.buildrun import metrics
from controller.buildrun.states import Decision
from controller.runtime.events import MESSAGE_MAX
from controller.runtime.kube import ApiError, Kube
from controller.runtime.podlogs import ELLIPSIS, Tail, bound, read_tail
from controller.runtime.shapes import at, text
from controller.runtime.text import truncate
from controller.settings import LogSnippetSettings

log = logging.getLogger(__name__)

# Seconds one read may take. A finished container's log is a local file the kubelet
# tails: through the API server, the real node answered in 4.2-5.6 ms (five reads of a
# failed step's 20 lines, tests/cluster/test_log_snippet.py's build, load about 3).
READ_TIMEOUT = 5.0
# Reads at once, and reads waiting beyond which a failure's Event goes without its lines
# (a burst of failures must not become a burst of kubelet requests, or a growing queue).
CONCURRENT_READS = 4
MAX_WAITING = 256
# Of the Event's MESSAGE_MAX bytes, what the lines always get: the outcome's message is
# cut to leave it (the status keeps that message whole).
LINES_ROOM = 512
# How much of a failed read's error the Event quotes.
PROBLEM_MAX = 200

READ, UNREADABLE, SKIPPED = "read", "unreadable", "skipped"


def failed_step(decision: Decision) -> tuple[str, str] | None:
    """(pod, container) of the step a failure names (failureDetails.location), or None
    when the decision is no failure of a step."""
    if decision.succeeded != "False" or decision.outcome is None:
        return None
    location = at(decision.outcome.failure_details, "location")
    pod, container = text(at(location, "pod")), text(at(location, "container"))
    return (pod, container) if pod and container else None


def event_message(message: str, container: str, tail: Tail | None, problem: str = "") -> str:
    """The failure's Event message: the outcome's `message`, then the lines of `tail` under
    a line naming `container` (or why there are none), within MESSAGE_MAX bytes of UTF-8.
    The lines' first go when it does not all fit: the last lines tell why it failed."""
    if tail is None:
        note = f"The log of {container} could not be read: {truncate(problem, PROBLEM_MAX)}"
        return _fit(_head(message, MESSAGE_MAX), note, ())
    if not tail.lines:
        return _fit(_head(message, MESSAGE_MAX), f"The log of {container} is empty.", ())
    cut = " (the read stopped short of the log's end)" if tail.cut else ""
    # The header's length with every line counted bounds it with fewer.
    room = MESSAGE_MAX - len(_header(container, len(tail.lines), cut).encode()) - 1
    head = _head(message, room)
    lines = bound(list(tail.lines), len(tail.lines), room - len(head.encode()) - 1)
    return _fit(head, _header(container, len(lines), cut), lines)


def _header(container: str, count: int, cut: str) -> str:
    return f"Last {count} line{'s' if count != 1 else ''} of {container}'s log{cut}:"


def _head(message: str, room: int) -> str:
    """`message`, its end cut (marked with an ellipsis) to leave LINES_ROOM of `room`
    bytes to the lines."""
    limit = max(room - LINES_ROOM, 0)
    encoded = message.encode()
    if len(encoded) <= limit:
        return message
    return encoded[:max(limit - len(ELLIPSIS.encode()), 0)].decode(
        "utf-8", errors="ignore") + ELLIPSIS


def _fit(message: str, note: str, lines: tuple[str, ...]) -> str:
    text = "\n".join((message, note, *lines))
    encoded = text.encode()
    if len(encoded) <= MESSAGE_MAX:
        return text
    return encoded[:MESSAGE_MAX].decode("utf-8", errors="ignore")


class FailureLogs:
    """Reads the failed step's log for an Event, as bounded by `settings`."""

    def __init__(self, kube: Kube, settings: LogSnippetSettings,
                 timeout: float = READ_TIMEOUT) -> None:
        self.kube = kube
        self.settings = settings
        self.timeout = timeout
        self._reads = asyncio.Semaphore(CONCURRENT_READS)
        self._waiting = 0
        for result in (READ, UNREADABLE, SKIPPED):
            metrics.LOG_SNIPPETS.labels(result)  # zero samples from the start, for rate()

    async def message(self, namespace: str, pod: str, container: str, message: str) -> str:
        """The Event message for a failure of `container` in `pod`: never raises."""
        if self._waiting >= MAX_WAITING:
            metrics.LOG_SNIPPETS.labels(SKIPPED).inc()
            return event_message(message, container, None,
                                 f"{MAX_WAITING} other reads were waiting")
        self._waiting += 1
        try:
            async with self._reads:
                tail = await read_tail(self.kube, namespace, pod, container,
                                       lines=self.settings.lines,
                                       max_bytes=self.settings.max_bytes, timeout=self.timeout)
        except Exception as exc:
            problem = _problem(exc, self.timeout)
            metrics.LOG_SNIPPETS.labels(UNREADABLE).inc()
            log.info("could not read a failed step's log for its event",
                     extra={"key": f"{namespace}/{pod}", "container": container,
                            "error": problem})
            return event_message(message, container, None, problem)
        finally:
            self._waiting -= 1
        metrics.LOG_SNIPPETS.labels(READ).inc()
        return event_message(message, container, tail)


def _problem(exc: Exception, timeout: float) -> str:
    """A failed read in a few words, for the Event."""
    if isinstance(exc, ApiError):
        said = f"{exc.status} {exc.reason}: {exc.message}"
        if exc.status == 403:  # first, so the cut to PROBLEM_MAX keeps it
            return f"the controller needs get on pods/log (manifests/rbac/pod_logs.yaml); {said}"
        return said
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

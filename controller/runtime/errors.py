"""Errors a reconcile raises on purpose, and the one classifier of API errors.

The split decides what happens to an object: a UserError fails it at once, a
RetryableError leaves its outcome open and requeues the key with backoff, a
TerminalError drops the key (nothing we can do would make the next try differ).

`classify` is the only place that maps an exception (an `ApiError`, a timeout, a
lost connection, anything else) to those terms; the predicates below it name the
few answers callers branch on. Informers, leader election and reconcilers all use
them, so "is this worth retrying" has one answer in the whole process.
"""

from __future__ import annotations

import asyncio

import aiohttp

from controller.runtime.kube import ApiError

# Low-cardinality labels for RetryableError, used as a metrics label: keep it closed.
# "timeout" is an API request's (the API server's 504, or no answer in time);
# "reconcile_timeout" a whole reconcile that outlived its own limit (controller.py).
ERROR_CLASSES = (
    "timeout",
    "reconcile_timeout",
    "connection",
    "server_error",
    "throttled",
    "conflict",
    "webhook",
    "forbidden",
    "unexpected",
)

# kube-apiserver wraps every failure to call an admission webhook (timeout, refused
# connection, bad response) as "failed calling webhook"; "admission webhook" is how
# a webhook's own 5xx answer is reported.
_WEBHOOK_MARKERS = ("failed calling webhook", "admission webhook")


class ReconcileError(Exception):
    """Base."""


class UserError(ReconcileError):
    """User-originated (bad reference, bad parameters): the BuildRun fails at once, never
    retried."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class RetryableError(ReconcileError):
    """System-originated (timeouts, 5xx, conflicts, webhooks): outcome left open, retried with
    backoff."""

    def __init__(self, error_class: str, message: str) -> None:
        if error_class not in ERROR_CLASSES:
            # A free-form label would blow up metric cardinality; fail loudly in development.
            raise ValueError(f"error_class {error_class!r} is not one of {ERROR_CLASSES}")
        super().__init__(message)
        self.error_class = error_class
        self.message = message


class TerminalError(ReconcileError):
    """Neither retrying nor a status write can help (e.g. the API server rejected our own write
    as invalid): drop the key, count it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def classify(exc: Exception) -> ReconcileError:
    """Maps any exception to user/system/terminal terms.

    A ReconcileError is returned as it is; an ApiError by its status (see
    `_classify_status`); timeouts and lost connections are system errors; anything
    else is an unexpected system error (retried, never fatal).
    """
    if isinstance(exc, ReconcileError):
        return exc
    if isinstance(exc, ApiError):
        return _classify_status(exc.status, exc.reason, exc.message) or RetryableError(
            "unexpected", f"unhandled API answer {exc}"
        )
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return RetryableError("timeout", f"timed out: {exc!r}")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return RetryableError("connection", f"connection to the API server failed: {exc!r}")
    return RetryableError("unexpected", f"{type(exc).__name__}: {exc}")


def is_retryable(exc: BaseException) -> bool:
    """Whether trying the same request again may succeed. A cancellation (or any other
    BaseException that is not an Exception) never is: retrying it would keep a task alive
    that was told to stop."""
    return isinstance(exc, Exception) and isinstance(classify(exc), RetryableError)


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiError) and exc.status == 404


def is_already_exists(exc: BaseException) -> bool:
    return isinstance(exc, ApiError) and exc.status == 409 and exc.reason == "AlreadyExists"


def is_conflict(exc: BaseException) -> bool:
    """A write lost a race (resourceVersion or a precondition); not AlreadyExists."""
    return isinstance(exc, ApiError) and exc.status == 409 and exc.reason != "AlreadyExists"


def is_gone(exc: BaseException) -> bool:
    """The resourceVersion a list or watch asked for was compacted away."""
    return isinstance(exc, ApiError) and exc.status == 410


def is_invalid(exc: BaseException) -> bool:
    """The API server (or an admission webhook) refused the object itself."""
    return isinstance(exc, ApiError) and exc.status in (400, 422)


def is_too_large(exc: BaseException) -> bool:
    """etcd refuses a write over its request limit; the API server says so with a 413 or
    a 500 "request is too large"."""
    return isinstance(exc, ApiError) and (
        exc.status == 413 or (exc.status == 500 and "too large" in exc.message)
    )


def _classify_status(
    status: int, reason: str, message: str
) -> RetryableError | TerminalError | None:
    """Map a Kubernetes API error (HTTP status, Status.reason, Status.message) to an error.

    404 gives None: whether a missing object is a user error (a Build that does not
    exist) or expected (a TaskRun not created yet) only the caller knows. 409 covers
    both Conflict and AlreadyExists; a caller that expects AlreadyExists (creating a
    TaskRun under its deterministic name) checks the reason first.
    """
    text = f"HTTP {status} {reason}: {message or '(no message from the API server)'}"
    lowered = message.lower()
    if status == 409:
        return RetryableError("conflict", text)
    if status == 429:
        return RetryableError("throttled", text)
    if 500 <= status < 600 and any(marker in lowered for marker in _WEBHOOK_MARKERS):
        return RetryableError("webhook", text)
    if status == 504 or reason in ("Timeout", "ServerTimeout"):
        return RetryableError("timeout", text)
    if 500 <= status < 600:
        return RetryableError("server_error", text)
    if status == 403:
        # The Status message names the user, verb and resource that RBAC denied.
        return RetryableError("forbidden", text)
    if status == 404:
        return None
    if status in (400, 413, 422):
        # Our own request is malformed or too large: the same request fails the same way.
        return TerminalError(text)
    return RetryableError("unexpected", text)

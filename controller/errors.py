"""Errors a reconcile raises on purpose, and how a Kubernetes API error maps to them.

The split decides what happens to a BuildRun: a UserError fails it at once, a
RetryableError leaves its outcome open and requeues the key with backoff, a
TerminalError drops the key (nothing we can do would make the next try differ).
"""

from __future__ import annotations

# Low-cardinality labels for RetryableError, used as a metrics label: keep it closed.
ERROR_CLASSES = (
    "timeout",
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


def classify_status(
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

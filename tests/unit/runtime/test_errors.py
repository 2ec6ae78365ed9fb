"""`classify`, the one map from an exception to user/system/terminal terms, status by
status, and the predicates callers branch on."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from controller.runtime.errors import (
    ERROR_CLASSES,
    ReconcileError,
    RetryableError,
    TerminalError,
    UserError,
    classify,
    is_already_exists,
    is_conflict,
    is_gone,
    is_invalid,
    is_not_found,
    is_retryable,
    is_too_large,
)
from controller.runtime.kube import ApiError

WEBHOOK = 'Internal error occurred: failed calling webhook "v.example.com": timeout'
WEBHOOK_BAD_RESPONSE = (
    'Internal error occurred: failed calling webhook "x.example.com": received invalid webhook '
    'response: expected response.Content-Type "application/json", got "text/plain"'
)
FORBIDDEN = (
    'taskruns.tekton.dev is forbidden: User "system:serviceaccount:ctl:ctl" cannot create '
    'resource "taskruns" in API group "tekton.dev" in the namespace "team-a"'
)


@pytest.mark.parametrize(
    ("status", "reason", "message", "expected"),
    [
        (400, "BadRequest", "bad json", TerminalError),
        (401, "Unauthorized", "Unauthorized", "unexpected"),
        (403, "Forbidden", 'cannot patch resource "buildruns"', "forbidden"),
        (404, "NotFound", "not found", "unexpected"),  # the caller branches on 404 first
        (405, "MethodNotAllowed", "", "unexpected"),
        (409, "Conflict", "the object has been modified", "conflict"),
        (409, "AlreadyExists", "already exists", "conflict"),
        (410, "Expired", "too old resource version", "unexpected"),  # informers relist first
        (413, "RequestEntityTooLarge", "too large", TerminalError),
        (422, "Invalid", "spec: Required value", TerminalError),
        (429, "TooManyRequests", "please try again later", "throttled"),
        (500, "InternalError", "etcdserver: leader changed", "server_error"),
        (500, "InternalError", WEBHOOK, "webhook"),
        (500, "InternalError", WEBHOOK_BAD_RESPONSE, "webhook"),
        (503, "ServiceUnavailable", 'admission webhook "x" is unavailable', "webhook"),
        (500, "ServerTimeout", "cannot complete in time", "timeout"),
        (502, "", "bad gateway", "server_error"),
        (503, "ServiceUnavailable", "unavailable", "server_error"),
        (504, "Timeout", "no response in time", "timeout"),
        (504, "", WEBHOOK, "webhook"),
        (418, "", "teapot", "unexpected"),
    ],
)
def test_classify_by_status(status: int, reason: str, message: str,
                            expected: str | type) -> None:
    error = classify(ApiError(status, reason, message))
    if isinstance(expected, str):
        assert isinstance(error, RetryableError)
        assert error.error_class == expected
        assert is_retryable(ApiError(status, reason, message))
    else:
        assert type(error) is expected
        assert not is_retryable(ApiError(status, reason, message))
    assert str(status) in str(error) and message in str(error)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError(), "timeout"),  # asyncio.TimeoutError is TimeoutError
        (aiohttp.ServerTimeoutError("read"), "timeout"),
        (aiohttp.ClientConnectionError("reset"), "connection"),
        (aiohttp.ClientPayloadError("truncated"), "connection"),
        (ConnectionRefusedError(111, "refused"), "connection"),
        (OSError("no route"), "connection"),
        (KeyError("spec"), "unexpected"),
        (ValueError("bad lease"), "unexpected"),
    ],
)
def test_classify_other_exceptions(exc: Exception, expected: str) -> None:
    error = classify(exc)
    assert isinstance(error, RetryableError) and error.error_class == expected


def test_reconcile_errors_pass_through_unchanged() -> None:
    for error in (UserError("BuildNotFound", "m"), TerminalError("m"),
                  RetryableError("webhook", "m")):
        assert classify(error) is error


@pytest.mark.parametrize("exc", [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(1)])
def test_nothing_but_an_exception_is_ever_retryable(exc: BaseException) -> None:
    assert not is_retryable(exc)


def test_error_classes_are_a_closed_set() -> None:
    assert "unexpected" in ERROR_CLASSES
    with pytest.raises(ValueError, match="not one of"):
        RetryableError("oops", "a free-form label would blow up metric cardinality")


def test_predicates() -> None:
    conflict = ApiError(409, "Conflict", "modified")
    exists = ApiError(409, "AlreadyExists", "exists")
    assert is_conflict(conflict) and not is_conflict(exists)
    assert is_already_exists(exists) and not is_already_exists(conflict)
    assert is_not_found(ApiError(404, "NotFound", "")) and not is_not_found(KeyError())
    assert is_gone(ApiError(410, "Expired", "")) and not is_gone(ApiError(404, "", ""))
    assert is_invalid(ApiError(422, "Invalid", "")) and is_invalid(ApiError(400, "", ""))
    assert is_too_large(ApiError(413, "", ""))
    assert is_too_large(ApiError(500, "", "etcdserver: request is too large"))
    assert not is_too_large(ApiError(500, "", "leader changed"))


def test_error_classes_carry_their_fields() -> None:
    user = UserError("BuildNotFound", "build x not found")
    assert (user.reason, user.message, str(user)) == (
        "BuildNotFound", "build x not found", "build x not found")
    retry = RetryableError("conflict", "try again")
    assert (retry.error_class, str(retry)) == ("conflict", "try again")
    assert str(TerminalError("invalid")) == "invalid"
    for exc in (user, retry, TerminalError("x")):
        assert isinstance(exc, ReconcileError)


def test_forbidden_names_what_was_denied() -> None:
    error = classify(ApiError(403, "Forbidden", FORBIDDEN))
    assert 'cannot create resource "taskruns"' in str(error)


def test_an_answer_without_a_message_says_so() -> None:
    assert "no message" in str(classify(ApiError(500, "InternalError", "")))

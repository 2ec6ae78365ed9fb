"""controller.buildrun.status (conditions, TaskRun outcomes) and controller.runtime.errors
(error classes, API error classification). The reason constants: test_reasons.py."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.status import (
    MESSAGE_MAX,
    Outcome,
    outcome_from_taskrun,
    running_reason,
    succeeded_condition,
    truncate,
    with_condition,
)
from controller.runtime import errors
from controller.runtime.errors import (
    ERROR_CLASSES,
    RetryableError,
    TerminalError,
    UserError,
    classify,
    is_not_found,
)
from controller.runtime.kube import ApiError

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"

# --- truncate, succeeded_condition, with_condition


def test_truncate() -> None:
    assert truncate("abc", 3) == "abc"
    assert truncate("abcd", 3) == "ab…"
    assert len(truncate("x" * 100_000, MESSAGE_MAX)) == MESSAGE_MAX


def test_succeeded_condition() -> None:
    ready = {"type": "Ready", "status": "True"}
    succeeded = {"type": "Succeeded", "status": "Unknown", "reason": "Running"}
    assert succeeded_condition({"conditions": [ready, succeeded]}) == succeeded
    assert succeeded_condition({"conditions": [ready]}) is None
    assert succeeded_condition({}) is None
    assert succeeded_condition(None) is None


def test_with_condition_adds_condition_to_new_dict() -> None:
    status: dict[str, Any] = {"startTime": T0}
    new = with_condition(status, "Unknown", reasons.PENDING, "waiting", T0)
    assert status == {"startTime": T0}
    assert new == {
        "startTime": T0,
        "conditions": [
            {
                "type": "Succeeded",
                "status": "Unknown",
                "reason": "Pending",
                "message": "waiting",
                "lastTransitionTime": T0,
            }
        ],
    }


def test_with_condition_keeps_transition_time_when_status_unchanged() -> None:
    status = with_condition({}, "Unknown", reasons.PENDING, "waiting", T0)
    before = copy.deepcopy(status)
    new = with_condition(status, "Unknown", reasons.RUNNING, "running", T1)
    condition = succeeded_condition(new)
    assert condition is not None
    assert condition["lastTransitionTime"] == T0
    assert condition["reason"] == reasons.RUNNING
    assert condition["message"] == "running"
    assert status == before


def test_with_condition_moves_transition_time_when_status_changes() -> None:
    status = with_condition({}, "Unknown", reasons.RUNNING, "running", T0)
    condition = succeeded_condition(with_condition(status, "False", reasons.FAILED, "no", T1))
    assert condition is not None
    assert condition["status"] == "False"
    assert condition["lastTransitionTime"] == T1


def test_with_condition_sets_transition_time_missing_on_old_condition() -> None:
    status = {"conditions": [{"type": "Succeeded", "status": "Unknown"}]}
    condition = succeeded_condition(with_condition(status, "Unknown", reasons.PENDING, "m", T1))
    assert condition is not None
    assert condition["lastTransitionTime"] == T1


def test_with_condition_keeps_other_conditions_in_place() -> None:
    other = {"type": "Other", "status": "True"}
    status = {"conditions": [{"type": "Succeeded", "status": "Unknown"}, other]}
    new = with_condition(status, "True", reasons.SUCCEEDED, "done", T1)
    assert [c["type"] for c in new["conditions"]] == ["Succeeded", "Other"]
    assert new["conditions"][1] == other


def test_with_condition_truncates_to_schema_limits() -> None:
    new = with_condition({}, "False", "R" * 300, "m" * (MESSAGE_MAX + 10), T0)
    condition = succeeded_condition(new)
    assert condition is not None
    assert len(condition["message"]) == MESSAGE_MAX
    assert len(condition["reason"]) == 256


# --- outcome_from_taskrun


def taskrun(
    status: str,
    reason: str = "",
    message: str = "",
    **extra: Any,
) -> dict[str, Any]:
    condition = {"type": "Succeeded", "status": status, "reason": reason, "message": message}
    return {
        "metadata": {"name": "br-1234abcd", "namespace": "team-a"},
        "spec": extra.pop("spec", {}),
        "status": {"conditions": [condition], "podName": "br-1234abcd-pod", **extra},
    }


def step(name: str, exit_code: int, reason: str = "Completed", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "container": f"step-{name}",
        "terminated": {"exitCode": exit_code, "reason": reason, **extra},
    }


@pytest.mark.parametrize(
    "tr",
    [
        {"metadata": {"name": "x"}},
        {"metadata": {"name": "x"}, "status": {"conditions": []}},
        taskrun("Unknown", "Running"),
        taskrun("Unknown", "Pending"),
    ],
)
def test_outcome_is_none_while_unfinished(tr: dict[str, Any]) -> None:
    assert outcome_from_taskrun(tr) is None


def test_outcome_succeeded_with_digest() -> None:
    results = [
        {"name": "shp-image-digest", "type": "string", "value": "sha256:abc\n"},
        {"name": "other", "type": "array", "value": ["x"]},
    ]
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded", "All done", results=results))
    assert outcome == Outcome("True", reasons.SUCCEEDED, "All done", None, "sha256:abc")


def test_outcome_succeeded_without_digest() -> None:
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded"))
    assert outcome is not None
    assert outcome.digest is None
    assert outcome.message == "TaskRun br-1234abcd succeeded"


def test_outcome_ignores_oversized_digest() -> None:
    results = [{"name": "shp-image-digest", "value": "x" * 257}]
    outcome = outcome_from_taskrun(taskrun("True", "Succeeded", results=results))
    assert outcome is not None
    assert outcome.digest is None


def test_outcome_timeout() -> None:
    tr = taskrun("False", reasons.TASK_RUN_TIMEOUT, "timed out", spec={"timeout": "600s"})
    outcome = outcome_from_taskrun(tr)
    assert outcome is not None
    assert (outcome.status, outcome.reason) == ("False", reasons.BUILD_RUN_TIMEOUT)
    assert "600s" in outcome.message
    assert outcome.failure_details is None


def test_outcome_cancelled() -> None:
    outcome = outcome_from_taskrun(taskrun("False", reasons.TASK_RUN_CANCELLED, "cancelled"))
    assert outcome is not None
    assert (outcome.status, outcome.reason) == ("False", reasons.BUILD_RUN_CANCELED)


def test_outcome_failed_step_points_at_its_logs() -> None:
    steps = [step("source", 0), step("build", 2, "Error"), step("push", 1, "Error")]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", "step failed", steps=steps))
    assert outcome is not None
    assert outcome.reason == reasons.FAILED
    hint = "kubectl logs -n team-a br-1234abcd-pod -c step-build"
    assert hint in outcome.message
    assert outcome.failure_details == {
        "reason": reasons.FAILED,
        "message": outcome.message,
        "location": {"pod": "br-1234abcd-pod", "container": "step-build"},
    }


def test_outcome_failed_step_without_container_field() -> None:
    steps = [{"name": "build", "terminated": {"exitCode": 1, "reason": "Error"}}]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps))
    assert outcome is not None
    assert outcome.failure_details is not None
    assert outcome.failure_details["location"]["container"] == "step-build"


def test_outcome_out_of_memory() -> None:
    steps = [step("prepare", 1, "Error"), step("build", 137, "OOMKilled")]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps))
    assert outcome is not None
    assert outcome.reason == reasons.STEP_OUT_OF_MEMORY
    assert "kubectl logs -n team-a br-1234abcd-pod -c step-build" in outcome.message
    assert outcome.failure_details is not None
    assert outcome.failure_details["location"]["container"] == "step-build"


def test_outcome_pod_evicted_beats_out_of_memory() -> None:
    steps = [step("build", 137, "OOMKilled")]
    pod = {"status": {"reason": "Evicted", "message": "The node was low on resource: memory."}}
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps), pod)
    assert outcome is not None
    assert outcome.reason == reasons.POD_EVICTED
    assert outcome.message == "The node was low on resource: memory."


def test_outcome_pod_not_evicted_is_ignored() -> None:
    pod = {"status": {"phase": "Failed"}}
    outcome = outcome_from_taskrun(taskrun("False", "Failed", "it broke"), pod)
    assert outcome is not None
    assert outcome.reason == reasons.FAILED
    assert outcome.message == "it broke"
    assert outcome.failure_details == {
        "reason": reasons.FAILED,
        "message": "it broke",
        "location": {"pod": "br-1234abcd-pod"},
    }


def test_outcome_failure_details_from_results() -> None:
    results = [
        {"name": "shp-error-reason", "value": "GitAuthFailed"},
        {"name": "shp-error-message", "value": "authentication failed\n"},
    ]
    steps = [step("source", 1, "Error")]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps, results=results))
    assert outcome is not None
    assert outcome.reason == reasons.FAILED
    assert outcome.failure_details == {
        "reason": "GitAuthFailed",
        "message": "authentication failed",
        "location": {"pod": "br-1234abcd-pod", "container": "step-source"},
    }


def test_outcome_failure_details_from_termination_message() -> None:
    # Real Tekton keeps a failed TaskRun's results only in the step's termination message.
    message = json.dumps(
        [
            {"key": "shp-error-reason", "value": "GitRemotePrivate", "type": 1},
            {"key": "shp-error-message", "value": "repository is private", "type": 1},
        ]
    )
    steps = [step("source", 1, "Error", message=message)]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps))
    assert outcome is not None
    assert outcome.failure_details is not None
    assert outcome.failure_details["reason"] == "GitRemotePrivate"
    assert outcome.failure_details["message"] == "repository is private"


@pytest.mark.parametrize("message", ["not json", '{"key": "x"}', "[1, 2]"])
def test_outcome_ignores_unreadable_termination_message(message: str) -> None:
    steps = [step("build", 1, "Error", message=message)]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", steps=steps))
    assert outcome is not None
    assert outcome.failure_details is not None
    assert outcome.failure_details["reason"] == reasons.FAILED


def test_outcome_failure_details_bounded() -> None:
    results = [
        {"name": "shp-error-reason", "value": "R" * 1000},
        {"name": "shp-error-message", "value": "M" * 100_000},
    ]
    outcome = outcome_from_taskrun(taskrun("False", "Failed", results=results))
    assert outcome is not None
    assert outcome.failure_details is not None
    assert len(outcome.failure_details["reason"]) == 256
    assert len(outcome.failure_details["message"]) == MESSAGE_MAX


# --- running_reason


@pytest.mark.parametrize(
    ("tr", "expected"),
    [
        (
            taskrun("Unknown", "Running", "Not all Steps have completed"),
            (reasons.RUNNING, "Not all Steps have completed"),
        ),
        (taskrun("Unknown", "Running"), (reasons.RUNNING, "TaskRun br-1234abcd is running")),
        (
            taskrun("Unknown", "Pending", 'pod status "Initialized":"False"'),
            (reasons.PENDING, 'pod status "Initialized":"False"'),
        ),
        (taskrun("Unknown", "Started"), (reasons.PENDING, "TaskRun br-1234abcd is pending")),
        ({"metadata": {"name": "tr"}}, (reasons.PENDING, "TaskRun tr has not started yet")),
    ],
)
def test_running_reason(tr: dict[str, Any], expected: tuple[str, str]) -> None:
    assert running_reason(tr) == expected


# --- errors


def test_error_classes_carry_their_fields() -> None:
    user = UserError(reasons.BUILD_NOT_FOUND, "build x not found")
    assert (user.reason, user.message, str(user)) == (
        "BuildNotFound",
        "build x not found",
        "build x not found",
    )
    retry = RetryableError("conflict", "try again")
    assert (retry.error_class, str(retry)) == ("conflict", "try again")
    assert str(TerminalError("invalid")) == "invalid"
    for exc in (user, retry, TerminalError("x")):
        assert isinstance(exc, errors.ReconcileError)


def test_retryable_error_refuses_unknown_class() -> None:
    with pytest.raises(ValueError, match="not one of"):
        RetryableError("Timeout", "m")


WEBHOOK_TIMEOUT = (
    'Internal error occurred: failed calling webhook "x.example.com": failed to call webhook: '
    'Post "https://127.0.0.1:1234/validate?timeout=2s": context deadline exceeded'
)
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
        (409, "Conflict", "the object has been modified", "conflict"),
        (409, "AlreadyExists", 'taskruns.tekton.dev "x" already exists', "conflict"),
        (429, "TooManyRequests", "too many requests", "throttled"),
        (500, "InternalError", WEBHOOK_TIMEOUT, "webhook"),
        (500, "InternalError", WEBHOOK_BAD_RESPONSE, "webhook"),
        (503, "ServiceUnavailable", 'admission webhook "x" is unavailable', "webhook"),
        (504, "Timeout", 'Internal error: failed calling webhook "x": timeout', "webhook"),
        (504, "Timeout", "the server was unable to return a response in time", "timeout"),
        (500, "ServerTimeout", "the server cannot complete the requested operation", "timeout"),
        (504, "", "gateway timeout", "timeout"),
        (500, "InternalError", "etcdserver: leader changed", "server_error"),
        (502, "", "bad gateway", "server_error"),
        (503, "ServiceUnavailable", "the server is currently unable", "server_error"),
        (403, "Forbidden", FORBIDDEN, "forbidden"),
        (401, "Unauthorized", "Unauthorized", "unexpected"),
        (405, "MethodNotAllowed", "not allowed", "unexpected"),
    ],
)
def test_classify_retryable(status: int, reason: str, message: str, expected: str) -> None:
    error = classify(ApiError(status, reason, message))
    assert isinstance(error, RetryableError)
    assert error.error_class == expected
    assert expected in ERROR_CLASSES
    assert message in error.message
    assert str(status) in error.message


def test_classify_forbidden_names_what_was_denied() -> None:
    error = classify(ApiError(403, "Forbidden", FORBIDDEN))
    assert error is not None
    assert 'cannot create resource "taskruns"' in str(error)


def test_classify_not_found_is_for_the_caller() -> None:
    # Whether a 404 is a user error only the caller knows: it branches on is_not_found
    # first; one that escapes a reconcile is an unexpected system error.
    exc = ApiError(404, "NotFound", 'buildruns.shipwright.io "x" not found')
    assert is_not_found(exc)
    error = classify(exc)
    assert isinstance(error, RetryableError) and error.error_class == "unexpected"


@pytest.mark.parametrize(
    ("status", "reason"),
    [(400, "BadRequest"), (422, "Invalid"), (413, "RequestEntityTooLarge")],
)
def test_classify_terminal(status: int, reason: str) -> None:
    error = classify(ApiError(status, reason, "status.conditions[0].reason: Too long"))
    assert isinstance(error, TerminalError)
    assert "Too long" in str(error)


def test_classify_without_message() -> None:
    error = classify(ApiError(500, "InternalError", ""))
    assert error is not None
    assert "no message" in str(error)


def test_a_cancellation_is_never_retryable() -> None:
    # An informer retries what is_retryable says; a cancelled informer must stop.
    assert not errors.is_retryable(asyncio.CancelledError())
    assert errors.is_retryable(ApiError(503, "ServiceUnavailable", "try later"))
    assert not errors.is_retryable(ApiError(422, "Invalid", "bad"))

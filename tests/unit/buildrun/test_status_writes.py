"""controller.buildrun.status_writes: the Succeeded condition a status change sets
(`with_condition`). The writes themselves, row by row: test_actions.py."""

from __future__ import annotations

import copy
from typing import Any

from controller.buildrun import reasons
from controller.buildrun.outcomes import MESSAGE_MAX
from controller.buildrun.status_writes import with_condition
from controller.runtime.text import truncate
from controller.shipwright.conditions import succeeded_condition

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"

# --- truncate, with_condition (succeeded_condition: tests/unit/shipwright/test_conditions.py)


def test_truncate() -> None:
    assert truncate("abc", 3) == "abc"
    assert truncate("abcd", 3) == "ab…"
    assert len(truncate("x" * 100_000, MESSAGE_MAX)) == MESSAGE_MAX


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

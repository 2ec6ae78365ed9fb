"""Which BuildRuns a Build's retention limits delete (controller.buildlimit.limits)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from controller.buildlimit.limits import Limits, finished_kind, limits_of, victims


def run(name: str, created: str, status: str | None) -> dict[str, Any]:
    conditions = [] if status is None else [{"type": "Succeeded", "status": status}]
    return {"metadata": {"name": name, "creationTimestamp": f"2026-12-03T09:00:{created}Z"},
            "status": {"conditions": conditions}}


def names(chosen: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    return [(kind, b["metadata"]["name"]) for kind, b in chosen]


def test_the_oldest_beyond_each_limit_go_and_running_ones_never_count() -> None:
    buildruns = [
        run("s3", "30", "True"), run("s1", "10", "True"), run("s2", "20", "True"),
        run("f1", "11", "False"), run("f2", "21", "False"),
        run("r1", "01", "Unknown"), run("r2", "02", None),
    ]
    assert names(victims(Limits(succeeded=1, failed=1), buildruns)) == [
        ("succeeded", "s1"), ("succeeded", "s2"), ("failed", "f1")]


def test_a_limit_not_set_keeps_every_buildrun_of_that_kind() -> None:
    buildruns = [run("s1", "10", "True"), run("f1", "11", "False"), run("f2", "12", "False")]
    assert names(victims(Limits(succeeded=1), buildruns)) == []
    assert names(victims(Limits(failed=1), buildruns)) == [("failed", "f1")]


def test_within_the_limit_nothing_goes() -> None:
    buildruns = [run("s1", "10", "True"), run("s2", "11", "True")]
    assert victims(Limits(succeeded=2), buildruns) == []


def test_same_second_creations_are_ordered_by_name() -> None:
    buildruns = [run("b", "10", "True"), run("a", "10", "True"), run("c", "10", "True")]
    assert names(victims(Limits(succeeded=1), buildruns)) == [
        ("succeeded", "a"), ("succeeded", "b")]


@pytest.mark.parametrize(("retention", "expected"), [
    ({"succeededLimit": 3, "failedLimit": 1}, Limits(3, 1)),
    ({"succeededLimit": 2}, Limits(2, None)),
    ({"ttlAfterFailed": "1h"}, Limits()),
    (None, Limits()),
    # What the schema should have refused never means "delete everything".
    ({"succeededLimit": 0, "failedLimit": -1}, Limits()),
    ({"succeededLimit": "2", "failedLimit": True}, Limits()),
])
def test_limits_of_a_build(retention: Any, expected: Limits) -> None:
    assert limits_of({"spec": {"retention": retention}}) == expected
    assert bool(limits_of({"spec": {"retention": retention}})) == bool(
        expected.succeeded or expected.failed)


def test_finished_kind() -> None:
    assert finished_kind(run("a", "00", "True")) == "succeeded"
    assert finished_kind(run("a", "00", "False")) == "failed"
    assert finished_kind(run("a", "00", "Unknown")) is None
    assert finished_kind({"metadata": {}}) is None

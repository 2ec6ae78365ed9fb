"""controller.shipwright.recorded_executor: the one reader of which run a BuildRun's
status names (the BuildRun controller's phase, executor and run name, and `history`)."""

from __future__ import annotations

import pytest

from controller.shipwright.recorded_executor import RecordedExecutor, recorded_executor


@pytest.mark.parametrize(("status", "expected"), [
    # Shipwright's TaskRun mode writes both; its PipelineRun mode executor alone.
    ({"taskRunName": "tr", "executor": {"kind": "TaskRun", "name": "tr"}}, ("TaskRun", "tr")),
    ({"executor": {"kind": "PipelineRun", "name": "pr"}}, ("PipelineRun", "pr")),
    # Written before status.executor existed: a TaskRun.
    ({"taskRunName": "tr"}, ("TaskRun", "tr")),
    # A kind nobody here runs is still the kind named (the caller decides what it means).
    ({"executor": {"kind": "CustomRun", "name": "x"}}, ("CustomRun", "x")),
    # Not started, or nothing readable: none.
    ({}, None),
    (None, None),
    ({"executor": {"kind": "TaskRun", "name": ""}, "taskRunName": ""}, None),
    ({"executor": "tr", "taskRunName": ["tr"]}, None),
    ({"executor": None, "taskRunName": "tr"}, ("TaskRun", "tr")),
])
def test_the_run_a_status_names(status: object, expected: tuple[str, str] | None) -> None:
    got = recorded_executor(status)
    assert got == (RecordedExecutor(*expected) if expected is not None else None)

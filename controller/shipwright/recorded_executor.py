"""Which run a BuildRun's status names: status.executor, or the deprecated
status.taskRunName (Shipwright v0.20's BuildRunStatus). The BuildRun controller reads
it to find the run it started and what kind that is, `history` to find the run's Events.
"""

from __future__ import annotations

from typing import NamedTuple

from controller.runtime.shapes import at, mapping, text
from controller.shipwright.resources import TASKRUNS


class RecordedExecutor(NamedTuple):
    """A run as status.executor names it: its kind (TaskRun, PipelineRun) and name."""

    kind: str
    name: str


def recorded_executor(status: object) -> RecordedExecutor | None:
    """The run a BuildRun's status names, None when it names none (not started yet).

    status.executor when it has a name (Shipwright writes it for a run of either kind),
    else status.taskRunName as a TaskRun's: Shipwright writes that deprecated field for a
    TaskRun only, and older versions (of this controller too) wrote only it. Total: a
    field of the wrong type reads as absent."""
    name = text(at(status, "executor", "name"))
    if name:
        return RecordedExecutor(text(at(status, "executor", "kind")), name)
    taskrun = text(mapping(status).get("taskRunName"))
    return RecordedExecutor(TASKRUNS.kind, taskrun) if taskrun else None

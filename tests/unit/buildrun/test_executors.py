"""BUILDRUN_EXECUTOR (controller/buildrun/resources/config.py) and what a BuildRun runs as
(controller/buildrun/executors.py), without a server."""

from __future__ import annotations

from typing import Any

import pytest

from controller.buildrun import setup as buildrun_setup
from controller.buildrun.executors import EXECUTORS, PIPELINERUN, TASKRUN, executor_of
from controller.buildrun.resources.config import ShipwrightConfig
from controller.runtime.informers import InformerFactory
from controller.runtime.kube import ConfigError
from controller.settings import Settings
from controller.shipwright.resources import PIPELINERUNS, TASKRUNS
from tests.fakekube import FakeKube


@pytest.mark.parametrize(("environ", "kind"), [
    ({}, "TaskRun"), ({"BUILDRUN_EXECUTOR": ""}, "TaskRun"),
    ({"BUILDRUN_EXECUTOR": "TaskRun"}, "TaskRun"),
    ({"BUILDRUN_EXECUTOR": "PipelineRun"}, "PipelineRun"),
])
def test_buildrun_executor_as_shipwright_reads_it(environ: dict[str, str], kind: str) -> None:
    assert ShipwrightConfig.from_env(environ).executor == kind


@pytest.mark.parametrize("value", ["pipelinerun", "Pod", " TaskRun"])
def test_any_other_executor_is_one_clear_line(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        ShipwrightConfig.from_env({"BUILDRUN_EXECUTOR": value})
    assert str(refused.value) == ("BUILDRUN_EXECUTOR must be TaskRun (the default) or "
                                  f"PipelineRun, not {value!r}")
    assert "\n" not in str(refused.value)


def test_the_controller_is_refused_at_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read once, when the BuildRun controller is set up (App.create: the CLI prints the
    ConfigError as one line and exits 2)."""
    monkeypatch.setenv("BUILDRUN_EXECUTOR", "Job")
    informers = InformerFactory(None, None, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="BUILDRUN_EXECUTOR"):
        buildrun_setup.setup(FakeKube(), Settings(), None, informers)  # type: ignore[arg-type]
    assert informers.all() == ()


@pytest.mark.parametrize(("executor", "watched"), [
    ("TaskRun", {TASKRUNS}), ("PipelineRun", {TASKRUNS, PIPELINERUNS})])
def test_the_pipelinerun_informer_runs_only_when_configured(
        monkeypatch: pytest.MonkeyPatch, executor: str, watched: set[Any]) -> None:
    """A cluster without Tekton's PipelineRun CRD stays ready with TaskRuns; with
    PipelineRuns their TaskRuns are still watched (results, the failed one's pod)."""
    monkeypatch.setenv("BUILDRUN_EXECUTOR", executor)
    informers = InformerFactory(None, None, None)  # type: ignore[arg-type]
    buildrun_setup.setup(FakeKube(), Settings(), None, informers)  # type: ignore[arg-type]
    tekton = {i.resource for i in informers.all() if i.resource.group == "tekton.dev"}
    assert tekton == watched


@pytest.mark.parametrize(("status", "expected"), [
    ({}, "configured"),
    ({"taskRunName": "tr"}, "TaskRun"),
    ({"executor": {"kind": "TaskRun", "name": "tr"}}, "TaskRun"),
    ({"executor": {"kind": "PipelineRun", "name": "pr"}}, "PipelineRun"),
    ({"executor": {"kind": "CustomRun", "name": "x"}}, "configured"),
])
@pytest.mark.parametrize("configured", [TASKRUN, PIPELINERUN])
def test_a_started_buildrun_keeps_what_it_runs_as(status: dict[str, Any], expected: str,
                                                  configured: Any) -> None:
    got = executor_of({"status": status}, configured)
    assert got is (configured if expected == "configured" else EXECUTORS[expected])


def test_each_executor_cancels_as_shipwrights_cancel() -> None:
    assert TASKRUN.cancel_patch["spec"]["status"] == "TaskRunCancelled"
    assert PIPELINERUN.cancel_patch == {"spec": {"status": "Cancelled"}}  # no statusMessage
    assert PIPELINERUN.cancelled({"spec": {"status": "Cancelled"}})
    assert not PIPELINERUN.cancelled({"spec": {"status": "TaskRunCancelled"}})
    assert (TASKRUN.records_taskrun_name, PIPELINERUN.records_taskrun_name) == (True, False)

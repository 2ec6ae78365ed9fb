"""Our PipelineRun against Shipwright's own: the oracle (hack/oracle) runs Shipwright
v0.20.13's GeneratePipelineRun and Tekton's PipelineRun SetDefaults + Validate on the
same inputs as the TaskRun's parity (test_parity.py: every official sample Build and
each field alone), plus a few cases only the PipelineRun needs.

Ours equals Shipwright's after parity.normalise_pipelinerun (each difference listed, with
its reason, in parity.NORMALISATION / PIPELINERUN_NORMALISATION and docs/taskrun.md,
"The PipelineRun"); Tekton's validation accepts ours wherever it accepts Shipwright's, and
refuses both alike where it refuses Shipwright's; where Shipwright refuses, we refuse.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.resources.pipelinerun import SOURCE_TIMESTAMP_REFUSED
from controller.runtime.errors import UserError
from tests.doctext import section
from tests.oracle.parity import (
    PIPELINERUN_NORMALISATION,
    Case,
    compare,
    diff,
    normalise_pipelinerun,
)
from tests.oracle.test_parity import (
    FIELD_CASES,
    REFUSED,
    REFUSED_BEFORE_GENERATION,
    sample_cases,
    variant,
)

JSON = dict[str, Any]

PIPELINERUN_CASES: list[Case] = [
    # No source: Shipwright's source-acquisition task has no step, which Tekton refuses.
    variant("pipelinerun/no-source", source={}),
    variant("pipelinerun/array-left-empty", build={"paramValues": [
        {"name": "target", "value": "all"}, {"name": "flags", "values": []}]}),
    variant("pipelinerun/array-of-secrets-only", build={"paramValues": [
        {"name": "target", "value": "all"}, {"name": "flags", "values": [
            {"secretValue": {"name": "creds", "key": "a"}}]}]}),
    # An empty scheduler name: Shipwright's PipelineRun sets none (its TaskRun an empty one).
    variant("pipelinerun/scheduler-name-empty", build={"schedulerName": ""}),
    variant("pipelinerun/no-push", strategy={"steps": [
        {"name": "build", "image": "example.com/builder:1",
         "args": ["$(params.shp-output-image)", "$(params.target)"]}]}),
]
CASES = sample_cases() + FIELD_CASES + PIPELINERUN_CASES

# Shipwright's generator takes a SourceTimestamp as given (whatever the source) and
# points the output-image task at a result it does not declare: we refuse it.
REFUSED_ON_PURPOSE = {"output/timestamp-source", "output/timestamp-source-without-source"}
# Shipwright's PipelineRun generator refuses these, as its TaskRun generator does.
PIPELINERUN_REFUSED = REFUSED - REFUSED_ON_PURPOSE
# Refused by Shipwright's reconciler before generating; the multi-arch preflight passes
# under the PipelineRun executor, so those cases are compared.
PIPELINERUN_REFUSED_BEFORE = {case_id: reason for case_id, reason in
                              REFUSED_BEFORE_GENERATION.items()
                              if reason != reasons.EXECUTOR_NOT_PIPELINE_RUN}
# Both Shipwright's PipelineRun and ours are refused by Tekton's validation, alike.
INVALID_FOR_TEKTON = {"pipelinerun/no-source": "missing field(s): "
                      "spec.pipelineSpec.tasks[0].taskSpec.steps"}
COMPARED = [c[0] for c in CASES if c[0] not in PIPELINERUN_REFUSED
            and c[0] not in PIPELINERUN_REFUSED_BEFORE and c[0] not in REFUSED_ON_PURPOSE]


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[JSON, JSON | UserError]]:
    """Every case through the oracle in one process."""
    return {case_id: (answer, mine)
            for case_id, answer, mine in compare(CASES, executor="PipelineRun")}


def test_the_cases_are_the_taskruns_and_more() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) == 11 + len(FIELD_CASES) + len(PIPELINERUN_CASES)
    assert {"platforms/build", "platforms/buildrun"} <= set(COMPARED)


@pytest.mark.parametrize("case_id", COMPARED)
def test_ours_equals_shipwrights(results: dict[str, tuple[JSON, JSON | UserError]],
                                 case_id: str) -> None:
    answer, mine = results[case_id]
    assert not answer["error"], answer["error"]
    assert not answer["shipwrightError"], answer["shipwrightError"]
    assert isinstance(mine, dict), f"we refused: {mine}"
    assert answer["shipwrightInvalid"] == INVALID_FOR_TEKTON.get(case_id, "")
    assert answer["oursInvalid"] == INVALID_FOR_TEKTON.get(case_id, "")
    assert mine["kind"] == "PipelineRun" and "pipelineSpec" in answer["shipwright"]["spec"]
    differences = diff(normalise_pipelinerun(answer["shipwright"]),
                       normalise_pipelinerun(answer["oursDecoded"]))
    assert not differences, "\n".join(differences)


@pytest.mark.parametrize("case_id", sorted(PIPELINERUN_REFUSED))
def test_we_refuse_what_shipwright_refuses(
    results: dict[str, tuple[JSON, JSON | UserError]], case_id: str
) -> None:
    answer, mine = results[case_id]
    assert answer["shipwrightError"], "Shipwright generated a PipelineRun here"
    assert isinstance(mine, UserError), "we generated a PipelineRun where Shipwright refused"


@pytest.mark.parametrize("case_id", sorted(PIPELINERUN_REFUSED_BEFORE))
def test_we_refuse_what_shipwrights_reconciler_refuses_before_generating(
    results: dict[str, tuple[JSON, JSON | UserError]], case_id: str
) -> None:
    answer, mine = results[case_id]
    assert answer["shipwright"], "Shipwright's generator refused"
    assert isinstance(mine, UserError), "we generated a PipelineRun"
    assert mine.reason == PIPELINERUN_REFUSED_BEFORE[case_id]


@pytest.mark.parametrize("case_id", sorted(REFUSED_ON_PURPOSE))
def test_a_source_timestamp_is_refused_where_shipwrights_could_not_be_read(
    results: dict[str, tuple[JSON, JSON | UserError]], case_id: str
) -> None:
    """Shipwright's output-image task reads the source timestamp from a result path it
    does not declare (so Tekton never replaces it); we refuse up front."""
    answer, mine = results[case_id]
    assert isinstance(mine, UserError)
    assert (mine.reason, mine.message) == (reasons.TASK_RUN_GENERATION_FAILED,
                                           SOURCE_TIMESTAMP_REFUSED)
    tasks = {t["name"]: t for t in answer["shipwright"]["spec"]["pipelineSpec"]["tasks"]}
    output = tasks["output-image"]["taskSpec"]
    [step] = output["steps"]
    assert "$(results.shp-source-default-source-timestamp.path)" in step["args"]
    assert "shp-source-default-source-timestamp" not in {r["name"] for r in output["results"]}


def test_resolved_parameter_values_are_the_one_difference_in_parameters(
    results: dict[str, tuple[JSON, JSON | UserError]]
) -> None:
    """Where Shipwright drops a Secret's value, ours resolves it as the TaskRun does, and
    the normalisation takes out that and nothing more."""
    answer, mine = results["params/secretValue"]
    assert isinstance(mine, dict)
    [strategy_task] = [t for t in mine["spec"]["pipelineSpec"]["tasks"]
                       if t["name"] == "build-strategy"]
    env = strategy_task["taskSpec"]["steps"][0]["env"][0]
    assert env["valueFrom"] == {"secretKeyRef": {"name": "creds", "key": "token"}}
    target = {p["name"]: p["value"] for p in mine["spec"]["params"]}["target"]
    assert target == f"--token=$({env['name']})"
    assert "target" not in {p["name"] for p in answer["shipwright"]["spec"]["params"]}
    changed = copy.deepcopy(answer["oursDecoded"])
    changed["spec"]["params"][0]["value"] = "registry.example.com/elsewhere"
    assert diff(normalise_pipelinerun(answer["shipwright"]), normalise_pipelinerun(changed))


def test_the_comparison_sees_a_difference(
    results: dict[str, tuple[JSON, JSON | UserError]]
) -> None:
    """The normalisation does not hide real differences: one changed argument shows."""
    answer, _ = results["base"]
    changed = copy.deepcopy(answer["oursDecoded"])
    source = changed["spec"]["pipelineSpec"]["tasks"][0]["taskSpec"]
    source["steps"][0]["args"][1] = "https://example.com/other.git"
    assert diff(normalise_pipelinerun(answer["shipwright"]), normalise_pipelinerun(changed))
    tasks = normalise_pipelinerun(answer["shipwright"])["spec"]["pipelineSpec"]["tasks"]
    assert [t["name"] for t in tasks] == ["source-acquisition", "build-strategy",
                                          "output-image"], "nothing compared"


def test_the_docs_list_every_deliberate_difference() -> None:
    shown = section("docs/taskrun.md", "The PipelineRun")
    for what, _ in PIPELINERUN_NORMALISATION:
        assert what.split(" (")[0] in shown, what
    assert "SourceTimestamp" in shown

"""The BuildRun status from a TaskRun or PipelineRun, against Shipwright's own code
through hack/oracle: status.output and status.source from a finished TaskRun's results
(UpdateBuildRunUsingTaskResults), and the whole status (Succeeded condition,
failureDetails, output, source, startTime, completionTime, buildSpec) as its reconciler
sets it from the BuildRun's start to a run as Tekton left it
(UpdateImageBuildRunFromExecutor and buildrun.go's own assignments), over
tests/oracle/status_corpus.py's corpus."""

from __future__ import annotations

import re
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.status import outcome_from_taskrun
from devtools.shipwright import oracle
from tests.oracle import status_corpus
from tests.oracle.test_parity import variant

JSON = dict[str, Any]

GIT = {"type": "Git", "git": {"url": "https://example.com/app.git"}}
OCI = {"type": "OCI", "ociArtifact": {"image": "example.com/src:1"}}


def results(**named: str) -> list[JSON]:
    return [{"name": f"shp-{name.replace('_', '-')}", "type": "string", "value": value}
            for name, value in named.items()]


CASES: list[tuple[str, JSON, list[JSON]]] = [
    ("everything-git", GIT, results(
        image_digest="sha256:abc", image_size="1234",
        image_vulnerabilities="CVE-1:c,CVE-2:H,CVE-3:m,CVE-4:L,CVE-5:x",
        source_default_commit_sha="0123abc", source_default_commit_author="Ann",
        source_default_branch_name="main", source_default_source_timestamp="1691234567")),
    ("oci", OCI, results(source_default_image_digest="sha256:def",
                         source_default_source_timestamp="0")),
    ("nothing", GIT, []),
    ("bad-size", GIT, results(image_size="big", image_digest="sha256:abc")),
    ("negative-size", GIT, results(image_size="-5")),
    ("git-partly", GIT, results(source_default_branch_name="dev")),
    ("blank-git", GIT, results(source_default_commit_sha="  ")),
    ("timestamp-without-source-result", GIT, results(
        source_default_source_timestamp="1691234567")),
    ("bad-timestamp", GIT, results(source_default_commit_sha="abc",
                                   source_default_source_timestamp="soon")),
]


def ours(taskrun_results: list[JSON]) -> JSON:
    taskrun = {"metadata": {"name": "t"}, "status": {
        "conditions": [{"type": "Succeeded", "status": "True"}], "results": taskrun_results}}
    outcome = outcome_from_taskrun(taskrun)
    assert outcome is not None
    return {"output": outcome.output, "source": outcome.source}


def theirs(status: JSON) -> JSON:
    """Shipwright always sets status.output, if only to {}: no output, for comparing."""
    return {key: status.get(key) or None for key in ("output", "source")}


@pytest.fixture(scope="module")
def answers() -> dict[str, JSON]:
    requests = []
    for case_id, source, taskrun_results in CASES:
        _, strategy, build, buildrun, _ = variant(case_id, source=source)
        requests.append(oracle.case(strategy, build, buildrun, case_id=case_id,
                                    results=taskrun_results))
    return {a["id"]: a for a in oracle.ask(requests)}


@pytest.mark.parametrize(("case_id", "source", "taskrun_results"), CASES,
                         ids=[c[0] for c in CASES])
def test_status_from_results_equals_shipwrights(
    answers: dict[str, JSON], case_id: str, source: JSON, taskrun_results: list[JSON]
) -> None:
    answer = answers[case_id]
    assert not answer["resultsPanic"], answer["resultsPanic"]
    assert theirs(answer["statusFromResults"]) == ours(taskrun_results)


def test_a_vulnerability_without_severity_panics_shipwright_and_is_unknown_for_us() -> None:
    """Deliberate difference: Shipwright indexes the part after ':' unchecked."""
    _, strategy, build, buildrun, _ = variant("no-severity", source=GIT)
    taskrun_results = results(image_vulnerabilities="CVE-1")
    [answer] = oracle.ask([oracle.case(strategy, build, buildrun, results=taskrun_results)])
    assert "index out of range" in answer["resultsPanic"]
    assert ours(taskrun_results)["output"] == {
        "vulnerabilities": [{"id": "CVE-1", "severity": "unknown"}]}



# --- the whole status, against Shipwright's reconciler (hack/oracle "statusOf")

CORPUS = status_corpus.corpus()


@pytest.fixture(scope="module")
def status_answers() -> dict[str, JSON]:
    answers = oracle.ask([status_corpus.request(case) for case in CORPUS])
    return {a["id"]: a for a in answers}


def test_the_corpus_has_real_runs_of_both_tekton_releases() -> None:
    releases = {case["tekton"] for case in status_corpus.captured()}
    # The oldest LTS Shipwright v0.20.13 supports, the release the stack ran before, and
    # the one it runs (make tekton-compat for the first two).
    assert {"v1.3.4", "v1.10.3", "v1.12.0"} <= releases, releases
    for release in releases:
        ids = {case["id"] for case in status_corpus.captured() if case["tekton"] == release}
        for executor in ("TaskRun", "PipelineRun"):
            assert {f"{release}/{executor}/{s}" for s in ("succeed", "fail", "oom", "timeout",
                                                          "cancel")} <= ids


@pytest.mark.parametrize("case", CORPUS, ids=[c["id"] for c in CORPUS])
def test_status_equals_shipwrights_or_differs_as_documented(
    status_answers: dict[str, JSON], case: JSON
) -> None:
    answer = status_answers[case["id"]]
    assert not answer["error"], answer["error"]
    assert not answer.get("statusPanic"), answer["statusPanic"]
    assert not answer.get("statusError"), answer["statusError"]
    ours = status_corpus.normalised(status_corpus.ours(case))
    theirs = status_corpus.normalised(status_corpus.theirs(answer))
    difference = status_corpus.difference_of(case)
    if difference is None:
        assert ours == theirs
    else:
        assert ours != theirs, f"{difference} is documented but no longer differs"
        assert status_corpus.DIFFERENCES[difference].holds(case, ours, theirs), (ours, theirs)


def test_status_parity_counts(status_answers: dict[str, JSON]) -> None:
    """The figures for BENCHMARKS/README: equal, and each documented difference."""
    counts: dict[str, int] = {}
    for case in CORPUS:
        key = status_corpus.difference_of(case) or "equal"
        counts[key] = counts.get(key, 0) + 1
    print(f"\nstatus oracle: {len(CORPUS)} cases "
          f"({len(status_corpus.captured())} captured on the stack): {counts}")
    assert counts.get("equal", 0) > len(CORPUS) // 2


def test_every_reason_tekton_v1_12_declares_is_known() -> None:
    """reasons.TEKTON_REASONS (the metric labels kept as they are) holds every reason
    Tekton v1.12.0 (the module the oracle is built with) declares."""
    source = oracle.tekton_source()
    declared: set[str] = set()
    for rel in ("pkg/apis/pipeline/v1/taskrun_types.go",
                "pkg/apis/pipeline/v1/pipelinerun_types.go", "pkg/pod/status.go"):
        text = (source / rel).read_text()
        declared |= set(re.findall(
            r"^\s+(?:TaskRunReason|PipelineRunReason|Reason)\w*\s+(?:\w+Reason\s+)?=\s+"
            r"\"([A-Za-z]+)\"", text, re.M))
    assert declared - reasons.TEKTON_REASONS == set()
    assert len(declared) > 60

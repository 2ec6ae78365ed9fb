"""status.output and status.source from a finished TaskRun's results, against Shipwright's
own UpdateBuildRunUsingTaskResults (through hack/oracle)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.buildrun.status import outcome_from_taskrun
from devtools.shipwright import oracle
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


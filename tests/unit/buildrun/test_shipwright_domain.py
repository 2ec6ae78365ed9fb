"""The reconciler's pure pieces of the Shipwright domain: the strategy kind, the labels
and owner a BuildRun of a Build gets, and status.executor."""

from __future__ import annotations

from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.buildruns import build_link, with_executor, without_service_account
from controller.buildrun.validation import strategy_kind
from controller.runtime.errors import UserError


@pytest.mark.parametrize(("ref", "kind"), [
    ({"name": "s"}, "BuildStrategy"),
    ({"name": "s", "kind": None}, "BuildStrategy"),
    ({"name": "s", "kind": ""}, "BuildStrategy"),
    ({"name": "s", "kind": "BuildStrategy"}, "BuildStrategy"),
    ({"name": "s", "kind": "ClusterBuildStrategy"}, "ClusterBuildStrategy"),
])
def test_strategy_kind_defaults_as_shipwright(ref: dict[str, Any], kind: str) -> None:
    assert strategy_kind(ref) == kind


@pytest.mark.parametrize("kind", ["Other", "clusterbuildstrategy", "x" * 300])
def test_an_unknown_strategy_kind_is_a_user_error(kind: str) -> None:
    with pytest.raises(UserError) as raised:
        strategy_kind({"name": "s", "kind": kind})
    assert raised.value.reason == reasons.UNKNOWN_STRATEGY_KIND
    assert len(raised.value.message) < 200  # a hostile kind is quoted shortened


def buildrun(labels: dict[str, str] | None = None,
             owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "run", "namespace": "ns", "uid": "br-uid",
                            "resourceVersion": "7"}
    if labels is not None:
        meta["labels"] = labels
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"metadata": meta, "spec": {"build": {"name": "app"}}}


def build(generation: int | None = 3, name: str = "app",
          at_deletion: bool | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": "b-uid"}
    if generation is not None:
        meta["generation"] = generation
    spec: dict[str, Any] = {}
    if at_deletion is not None:
        spec["retention"] = {"atBuildDeletion": at_deletion}
    return {"apiVersion": "shipwright.io/v1beta1", "kind": "Build", "metadata": meta,
            "spec": spec}


LABELS = {"build.shipwright.io/name": "app", "build.shipwright.io/generation": "3"}
OWNER = {"apiVersion": "shipwright.io/v1beta1", "kind": "Build", "name": "app",
         "uid": "b-uid"}


def test_a_buildrun_gets_the_builds_name_and_generation_labels() -> None:
    assert build_link(buildrun(), build()) == {"labels": LABELS}
    assert build_link(buildrun({"team": "x"}), build()) == {"labels": LABELS}  # merged
    assert build_link(buildrun(LABELS), build()) == {}
    # A newer generation of the Build (before the BuildRun started) relabels it.
    assert build_link(buildrun(LABELS), build(4)) == {"labels": {
        **LABELS, "build.shipwright.io/generation": "4"}}


def test_no_labels_without_a_generation_or_a_label_valid_name() -> None:
    assert build_link(buildrun(), build(None)) == {}
    assert build_link(buildrun(), build(name="a" * 64)) == {}


def test_at_build_deletion_makes_the_build_an_owner_over_the_version_read() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "c-uid"}
    stale = {**OWNER, "uid": "an-older-build"}
    assert build_link(buildrun(LABELS, [other, stale]), build(at_deletion=True)) == {
        "ownerReferences": [other, OWNER], "resourceVersion": "7"}
    assert build_link(buildrun(LABELS, [OWNER]), build(at_deletion=True)) == {}
    assert build_link(buildrun(LABELS), build(at_deletion=False)) == {}


def test_executor_is_filled_beside_an_older_taskrun_name() -> None:
    assert with_executor({"taskRunName": "tr"})["executor"] == {"kind": "TaskRun",
                                                                "name": "tr"}
    assert "executor" not in with_executor({})
    mine = {"kind": "TaskRun", "name": "x"}
    assert with_executor({"taskRunName": "tr", "executor": mine})["executor"] == mine


def test_generate_is_taken_out_of_the_spec_spec_py_checks() -> None:
    run = {"metadata": {"name": "r"}, "spec": {"serviceAccount": ".generate", "timeout": "1m"}}
    assert without_service_account(run)["spec"] == {"timeout": "1m"}
    assert run["spec"]["serviceAccount"] == ".generate"  # not modified

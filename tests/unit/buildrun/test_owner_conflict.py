"""buildruns.owner_conflict: when Shipwright could not make a BuildRun's Build its
controller (retention.atBuildDeletion), in controller-runtime's words as Shipwright main
quotes them (#2252; its buildrun_test.go "already owned by another controller" case), and
the flag that makes it fail the BuildRun."""

from __future__ import annotations

import copy
from typing import Any

from controller.buildrun.buildruns import owner_conflict
from controller.cli import parser, settings_from

BUILD: dict[str, Any] = {
    "apiVersion": "shipwright.io/v1beta1", "kind": "Build",
    "metadata": {"name": "app", "namespace": "ns", "uid": "b-uid"},
    "spec": {"retention": {"atBuildDeletion": True}},
}
FOREIGN = {"apiVersion": "example.com/v1", "kind": "Pipeline", "name": "fakeOwner",
           "uid": "p-uid", "controller": True}


def buildrun(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "run", "namespace": "ns", "ownerReferences": list(refs)},
            "spec": {"build": {"name": "app"}}}


def test_another_controller_is_a_conflict_in_mains_words() -> None:
    assert owner_conflict(buildrun(FOREIGN), BUILD) == (
        "unexpected error when trying to set the ownerreference: Object ns/run is already "
        "owned by another Pipeline controller fakeOwner")


def test_no_conflict_without_at_build_deletion_or_a_controller() -> None:
    off = copy.deepcopy(BUILD)
    off["spec"]["retention"]["atBuildDeletion"] = False
    assert owner_conflict(buildrun(FOREIGN), off) is None
    assert owner_conflict(buildrun(FOREIGN), {**BUILD, "spec": {}}) is None
    # An owner that is no controller leaves room for the Build's controller reference.
    assert owner_conflict(buildrun({**FOREIGN, "controller": False}), BUILD) is None
    assert owner_conflict(buildrun({k: v for k, v in FOREIGN.items() if k != "controller"}),
                          BUILD) is None
    assert owner_conflict(buildrun(), BUILD) is None


def test_a_buildrun_its_build_owns_already_has_none() -> None:
    """Shipwright's IsOwnedByBuild (kind and name) comes first: nothing is set then."""
    mine = {"apiVersion": "shipwright.io/v1beta1", "kind": "Build", "name": "app",
            "uid": "b-uid"}
    assert owner_conflict(buildrun(mine, FOREIGN), BUILD) is None


def test_another_build_as_controller_is_a_conflict() -> None:
    other = {"apiVersion": "shipwright.io/v1beta1", "kind": "Build", "name": "old",
             "uid": "o-uid", "controller": True}
    assert owner_conflict(buildrun(other), BUILD) == (
        "unexpected error when trying to set the ownerreference: Object ns/run is already "
        "owned by another Build controller old")


def test_the_flag_is_off_unless_given() -> None:
    assert settings_from(parser().parse_args([])).fail_on_owner_conflict is False
    assert settings_from(parser().parse_args(["--fail-on-owner-conflict"])) \
        .fail_on_owner_conflict is True

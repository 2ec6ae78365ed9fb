"""controller.buildrun.serviceaccounts: which ServiceAccount a BuildRun runs as, what a
generated one looks like and which secrets are added, checked against Shipwright's own
constants where it has them (read from its source in the Go module cache)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from controller.buildrun import reasons, serviceaccounts
from controller.buildrun.buildruns import owned_by
from controller.buildrun.serviceaccounts import Choice
from controller.runtime.kube import STRATEGIC_MERGE_PATCH
from devtools.shipwright import source as shipwright

NS = "team"


def buildrun(name: str = "run-1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
            "metadata": {"name": name, "namespace": NS, "uid": "uid-1"},
            "spec": {"build": {"name": "app"}, **spec}}


def go_string_constants(relative: str) -> dict[str, str]:
    """`Name = "value"` (and `Name string = "value"`) constants of a Go file of Shipwright."""
    text = (shipwright.source_dir() / relative).read_text()
    return dict(re.findall(r'^\s*(\w+)\s+(?:string\s+)?=\s+"([^"]*)"', text, re.M))


def test_the_names_are_shipwrights() -> None:
    go = go_string_constants("pkg/reconciler/buildrun/resources/service_accounts.go")
    assert go["DefaultServiceAccountName"] == serviceaccounts.DEFAULT
    assert go["PipelineServiceAccountName"] == serviceaccounts.PIPELINE
    source = (shipwright.source_dir()
              / "pkg/reconciler/buildrun/resources/service_accounts.go").read_text()
    assert f'*buildRun.Spec.ServiceAccount == "{serviceaccounts.GENERATE}"' in source
    # GetGeneratedServiceAccountName returns the BuildRun's own name.
    assert re.search(r"func GetGeneratedServiceAccountName\(.*\) string \{\s*return "
                     r"buildRun.Name\s*\}", source)


def test_the_new_reasons_are_shipwrights() -> None:
    go = go_string_constants("pkg/reconciler/buildrun/resources/conditions.go")
    assert go["ClusterBuildStrategyNotFound"] == reasons.CLUSTER_BUILD_STRATEGY_NOT_FOUND
    assert go["ConditionUnknownStrategyKind"] == reasons.UNKNOWN_STRATEGY_KIND
    assert go["ConditionBuildRegistrationFailed"] == reasons.BUILD_REGISTRATION_FAILED
    assert go["ConditionServiceAccountNotFound"] == reasons.SERVICE_ACCOUNT_NOT_FOUND
    assert {reasons.CLUSTER_BUILD_STRATEGY_NOT_FOUND, reasons.UNKNOWN_STRATEGY_KIND,
            reasons.BUILD_REGISTRATION_FAILED} <= reasons.USER_ERROR_REASONS


@pytest.mark.parametrize(("spec", "choice"), [
    ({}, Choice("default", candidates=("pipeline", "default"))),
    ({"serviceAccount": ""}, Choice("default", candidates=("pipeline", "default"))),
    ({"serviceAccount": "builder"}, Choice("builder", explicit=True)),
    ({"serviceAccount": ".generate"}, Choice("run-1", generated=True)),
])
def test_choose(spec: dict[str, Any], choice: Choice) -> None:
    assert serviceaccounts.choose(buildrun(**spec)) == choice
    assert serviceaccounts.is_generated(buildrun(**spec)) is choice.generated


def test_generated_service_account_is_owned_labelled_and_holds_the_push_secret() -> None:
    sa = serviceaccounts.generated_service_account(buildrun(serviceAccount=".generate"),
                                                   "registry-creds")
    assert sa == {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {
            "name": "run-1", "namespace": NS,
            "labels": {"buildrun.shipwright.io/name": "run-1"},
            "ownerReferences": [{
                "apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun", "name": "run-1",
                "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}],
        },
        "automountServiceAccountToken": False,
        "secrets": [{"name": "registry-creds"}],
    }
    assert owned_by(sa, buildrun())


def test_generated_service_account_without_a_push_secret_lists_none() -> None:
    sa = serviceaccounts.generated_service_account(buildrun(), None)
    assert "secrets" not in sa


def test_a_namesake_is_not_owned() -> None:
    user_sa = {"metadata": {"name": "run-1", "namespace": NS}}
    other = {"metadata": {"name": "run-1", "namespace": NS, "ownerReferences": [
        {"kind": "BuildRun", "name": "run-1", "uid": "uid-of-an-older-run"}]}}
    assert not owned_by(user_sa, buildrun())
    assert not owned_by(other, buildrun())


@pytest.mark.parametrize(("secrets", "push", "missing"), [
    (None, None, []),
    (None, "push", ["push"]),
    ([{"name": "token-abc"}], "push", ["push"]),
    ([{"name": "token-abc"}, {"name": "push"}], "push", []),
    ([{"name": "push"}], None, []),
])
def test_missing_secrets(secrets: list[dict[str, str]] | None, push: str | None,
                         missing: list[str]) -> None:
    sa: dict[str, Any] = {"metadata": {"name": "builder"}}
    if secrets is not None:
        sa["secrets"] = secrets
    assert serviceaccounts.missing_secrets(sa, push) == missing


def test_secrets_patch_only_names_the_added_ones() -> None:
    """Strategic merge: the server merges by name; the patch never restates the others."""
    assert serviceaccounts.secrets_patch(["a", "b"]) == {"secrets": [{"name": "a"},
                                                                    {"name": "b"}]}
    assert STRATEGIC_MERGE_PATCH == "application/strategic-merge-patch+json"

"""controller/shipwright/crds.py `problem`: which CRDs the controller refuses to start on,
in one line (tests/cluster/test_storage_versions.py shows it on the API server)."""

from __future__ import annotations

from typing import Any

from controller.shipwright.crds import problem

JSON = dict[str, Any]


def crd(stored: list[str] | None = None, conversion: JSON | None = None) -> JSON:
    obj: JSON = {"metadata": {"name": "buildruns.shipwright.io"}, "spec": {},
                 "status": {"storedVersions": stored if stored is not None else ["v1beta1"]}}
    if conversion is not None:
        obj["spec"]["conversion"] = conversion
    return obj


def test_ours_and_shipwrights_without_its_webhook_are_served() -> None:
    assert problem(crd()) is None
    assert problem(crd(conversion={"strategy": "None"})) is None
    assert problem({"metadata": {"name": "x"}}) is None  # no status yet


def test_a_version_still_stored_other_than_v1beta1_is_refused_in_one_line() -> None:
    line = problem(crd(["v1alpha1", "v1beta1"]))
    assert line is not None and "\n" not in line
    assert line.startswith("CRD buildruns.shipwright.io lists v1alpha1 in status.storedVersions")
    assert "run `buildrun-controller migrate-storage`" in line
    assert line.endswith('(docs/v1alpha1.md)')
    assert problem(crd(["v1beta1", "v1"])) is not None  # any version besides v1beta1


def test_shipwrights_conversion_webhook_is_refused() -> None:
    line = problem(crd(conversion={"strategy": "Webhook", "webhook": {}}))
    assert line is not None and "converts through a webhook (Webhook)" in line

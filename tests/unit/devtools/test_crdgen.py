"""devtools/crds/crdgen.py: manifests/crds/ is its output, and the pieces it reads from
Kubernetes come out as Kubernetes means them."""

from __future__ import annotations

import re
from typing import Any

from devtools.crds import crdgen


def test_manifests_crds_are_what_crdgen_writes() -> None:
    stale = [name for name, crd in crdgen.crds().items()
             if (crdgen.CRDS_DIR / name).read_text() != crdgen.render(crd)]
    assert not stale, (f"run `python -m devtools.crds.crdgen` and commit: {stale} differ "
                       "from its output")


def test_the_quantity_pattern_follows_kubernetes_grammar() -> None:
    pattern = re.compile(crdgen.QUANTITY_PATTERN)
    for good in ("1", "500m", "1.5Gi", "2e3", ".5", "+1k", "-1E-2", "128974848", "100n"):
        assert pattern.match(good), good
    for bad in ("1GB", "Gi", "1.2.3", "1 Gi", "", "1ki", "e3"):
        assert not pattern.match(bad), bad


def test_only_kubernetes_explicit_defaults_are_kept() -> None:
    defaults = crdgen.explicit_defaults()
    assert defaults[("LocalObjectReference", "name")] == ""  # +kubebuilder:default=""
    assert defaults[("ConfigMapKeySelector", "name")] == ""  # through the inlined struct
    assert defaults[("ContainerPort", "protocol")] == "TCP"
    assert ("ConfigMapKeySelector", "key") not in defaults  # OpenAPI's zero value only
    assert ("AzureDiskVolumeSource", "cachingMode") not in defaults  # +default=ref(...)
    volume = crdgen.core("Volume")["properties"]
    assert "default" not in volume["name"]
    assert volume["configMap"]["properties"]["name"]["default"] == ""


def test_structs_inlining_an_atomic_struct_are_atomic() -> None:
    assert crdgen.atomic_struct("LocalObjectReference")
    assert crdgen.atomic_struct("ConfigMapVolumeSource")
    assert not crdgen.atomic_struct("VolumeMount")
    assert crdgen.core("Volume")["properties"]["configMap"]["x-kubernetes-map-type"] == "atomic"


def test_core_types_are_inlined_and_structural() -> None:
    env = crdgen.core("EnvVar")
    assert env["required"] == ["name"]
    ref = env["properties"]["valueFrom"]["properties"]["resourceFieldRef"]
    assert ref["properties"]["divisor"]["x-kubernetes-int-or-string"] is True
    assert "$ref" not in str(crdgen.crds())


def test_every_buildrun_spec_field_but_state_is_immutable() -> None:
    """spec.retention too, but by the rule on the whole BuildRun, which alone sees the
    status: until completionTime is set."""
    spec = crdgen.build_run_spec()
    rules = " ".join(r["rule"] for r in spec["x-kubernetes-validations"])
    for field in spec["properties"]:
        if field not in ("state", "retention"):
            assert f"self.{field} == oldSelf.{field}" in rules, field
    assert "retention" not in rules
    assert "self.state == 'BuildRunCanceled'" in rules
    [retention] = [r for r in buildrun_schema()["x-kubernetes-validations"]
                   if "spec.retention" in r["rule"]]
    assert retention["rule"].startswith(
        "(has(oldSelf.status) && has(oldSelf.status.completionTime)) || ")
    assert "self.spec.retention == oldSelf.spec.retention" in retention["rule"]


def buildrun_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crdgen.crds()["shipwright.io_buildruns.yaml"]["spec"]["versions"][
        0]["schema"]["openAPIV3Schema"]
    return schema


def test_a_finished_buildruns_status_is_frozen_by_one_rule_on_the_whole_object() -> None:
    """On the root: a rule under .status is not evaluated when a write removes the status
    (tests/cluster/test_frozen_outcome.py tries every write form on the API server), and a
    second one there would only repeat the refusal. It asks first whether the stored
    BuildRun has finished, so that a write to an unfinished one (every status write the
    controller sends) costs two field tests; its message names what changed."""
    schema = buildrun_schema()
    assert "x-kubernetes-validations" not in schema["properties"]["status"]
    [frozen] = [r for r in schema["x-kubernetes-validations"]
                if "self.status == oldSelf.status" in r["rule"]]
    assert frozen["rule"].startswith(
        "!(has(oldSelf.status) && has(oldSelf.status.completionTime)) || ")
    assert frozen["fieldPath"] == ".status"
    for message in (crdgen.FROZEN_STATUS, crdgen.FROZEN_COMPLETION_TIME,
                    crdgen.FROZEN_SUCCEEDED):
        assert f'"{message}"' in frozen["messageExpression"]

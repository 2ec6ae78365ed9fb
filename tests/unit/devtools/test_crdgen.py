"""devtools/crds/crdgen.py: manifests/crds/ is its output, and the pieces it reads from
Kubernetes come out as Kubernetes means them."""

from __future__ import annotations

import re

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
    [root] = crdgen.crds()["shipwright.io_buildruns.yaml"]["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"]["x-kubernetes-validations"]
    assert root["rule"].startswith(
        "(has(oldSelf.status) && has(oldSelf.status.completionTime)) || ")
    assert "self.spec.retention == oldSelf.spec.retention" in root["rule"]

"""Shipwright's own samples (samples/v1beta1 at devtools.shipwright.VERSION) on the real API
server with our CRDs: every object is admitted with strict field validation and stored as
written, and objects Shipwright's schema (or one of our listed additions,
devtools/crd_differences.py) refuses are refused, each with the error that says why.

Objects are created with dryRun=All: each goes through the whole admission chain (schema,
defaults, CEL rules, strict field validation) and nothing is stored, so the samples that
share a name (three Builds are called buildah-golang-build) and the cluster-scoped
strategies cannot collide with each other or with other tests.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from controller.runtime.kube import JSON, ApiError, Kube, Resource
from devtools import shipwright

pytestmark = pytest.mark.cluster

STRICT = {"dryRun": "All", "fieldValidation": "Strict"}

# Every kind the samples hold; a new one fails test_every_sample_kind_is_known.
RESOURCES = {
    ("shipwright.io/v1beta1", "Build"): Resource("shipwright.io", "v1beta1", "builds", "Build"),
    ("shipwright.io/v1beta1", "BuildRun"):
        Resource("shipwright.io", "v1beta1", "buildruns", "BuildRun"),
    ("shipwright.io/v1beta1", "BuildStrategy"):
        Resource("shipwright.io", "v1beta1", "buildstrategies", "BuildStrategy"),
    ("shipwright.io/v1beta1", "ClusterBuildStrategy"):
        Resource("shipwright.io", "v1beta1", "clusterbuildstrategies", "ClusterBuildStrategy",
                 namespaced=False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"):
        Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole",
                 namespaced=False),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"):
        Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
}


def samples() -> list[tuple[str, JSON]]:
    """(file relative to samples/v1beta1, object) for every object of every sample file."""
    root = shipwright.samples_dir()
    out = []
    for file in sorted(root.rglob("*.yaml")):
        for doc in yaml.safe_load_all(file.read_text()):
            if doc:
                out.append((str(file.relative_to(root)), doc))
    return out


def sample(kind: str, name: str) -> JSON:
    """A copy of the first sample object of `kind` called `name`."""
    for _, obj in samples():
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return copy.deepcopy(obj)
    raise LookupError(f"no sample {kind} {name} in {shipwright.samples_dir()}")


async def create(kube: Kube, namespace: str, obj: JSON) -> JSON:
    resource = RESOURCES[(obj["apiVersion"], obj["kind"])]
    return await kube.request("POST", resource.path(namespace), query=STRICT, body=obj)


def missing(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Paths where `stored` lacks or changed what `sent` has (defaults may add more)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        return [p for key, value in sent.items()
                for p in (missing(value, stored[key], f"{path}.{key}") if key in stored
                          else [f"{path}.{key}"])]
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        return [p for i, (a, b) in enumerate(zip(sent, stored, strict=True))
                for p in missing(a, b, f"{path}[{i}]")]
    return [] if sent == stored else [path]


def test_every_sample_kind_is_known() -> None:
    found = samples()
    kinds = {(obj["apiVersion"], obj["kind"]) for _, obj in found}
    assert kinds <= RESOURCES.keys(), kinds - RESOURCES.keys()
    shipwright_kinds = {kind for api, kind in kinds if api.startswith("shipwright.io/")}
    assert shipwright_kinds == {"Build", "BuildRun", "BuildStrategy", "ClusterBuildStrategy"}
    assert len(found) >= 30, len(found)


async def test_every_sample_is_admitted_strictly_and_stored_as_written(
    kube: Kube, namespace: str
) -> None:
    refused, changed = [], []
    for file, obj in samples():
        try:
            stored = await create(kube, namespace, obj)
        except ApiError as err:
            refused.append(f"{file} {obj['kind']}/{obj['metadata']['name']}: {err}"[:600])
            continue
        lost = missing(obj.get("spec"), stored.get("spec"), ".spec")
        if lost:
            changed.append(f"{file}: {lost[:5]}")
    assert not refused, "\n".join(refused)
    assert not changed, "\n".join(changed)


# Objects Shipwright refuses: each is a sample with one thing wrong, and the fragment of
# the API server's answer that names it. All but the strategy kind and the source type
# rules are Shipwright's own schema; those two are ours (devtools/crd_differences.py), for
# what Shipwright's Build validation refuses after admission.
Mutation = Callable[[JSON], object]


def _set(path: str, value: Any) -> Mutation:
    def mutate(obj: JSON) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
    return mutate


def _delete(path: str) -> Mutation:
    def mutate(obj: JSON) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[last]
    return mutate


REFUSED: list[tuple[str, str, str, Mutation, str]] = [
    ("source without type", "Build", "kaniko-golang-build",
     _delete("spec.source.type"), "spec.source.type: Required value"),
    ("type Git with an OCI artifact", "Build", "kaniko-golang-build",
     _set("spec.source.ociArtifact", {"image": "ghcr.io/x/source:latest"}),
     "spec.source: Invalid value: \"object\": type does not match the source"),
    ("type OCI without an OCI artifact", "BuildRun", "kaniko-golang-buildrun",
     _set("spec.build", {"spec": {"source": {"type": "OCI", "git": {"url": "https://x"}},
                                  "strategy": {"name": "kaniko"}, "output": {"image": "x"}}}),
     "spec.build.spec.source: Invalid value: \"object\": type does not match the source"),
    ("empty type with a source", "Build", "kaniko-golang-build",
     _set("spec.source.type", ""), "type definition is missing"),
    ("git source without url", "Build", "kaniko-golang-build",
     _delete("spec.source.git.url"), "spec.source.git.url: Required value"),
    ("unknown strategy kind", "Build", "kaniko-golang-build",
     _set("spec.strategy.kind", "NamespacedStrategy"), "spec.strategy.kind: Unsupported value"),
    ("no output", "Build", "kaniko-golang-build",
     _delete("spec.output"), "spec.output: Required value"),
    ("retention limit 0", "Build", "kaniko-golang-build",
     _set("spec.retention", {"failedLimit": 0}), "spec.retention.failedLimit: Invalid value"),
    ("timeout not a duration", "Build", "kaniko-golang-build",
     _set("spec.timeout", "soon"), "spec.timeout in body must be of type duration"),
    ("array parameter value as a string", "Build", "buildah-golang-build",
     _set("spec.paramValues", [{"name": "registries-search", "values": ["docker.io"]}]),
     "spec.paramValues[0].values[0]: Invalid value"),
    ("buildrun without build", "BuildRun", "kaniko-golang-buildrun",
     _delete("spec.build"), "spec.build: Required value"),
    ("strategy step without name", "ClusterBuildStrategy", "kaniko",
     _delete("spec.steps.0.name"), "spec.steps[0].name: Required value"),
    ("two steps of one name", "ClusterBuildStrategy", "buildkit",
     lambda s: s["spec"]["steps"].append(copy.deepcopy(s["spec"]["steps"][0])),
     "spec.steps[1]: Duplicate value"),
    ("parameter without description", "ClusterBuildStrategy", "kaniko",
     _delete("spec.parameters.0.description"), "spec.parameters[0].description: Required value"),
    ("security context without group", "ClusterBuildStrategy", "buildpacks-v3",
     _delete("spec.securityContext.runAsGroup"), "spec.securityContext.runAsGroup: Required value"),
    ("strategy without steps", "BuildStrategy", "buildpacks-v3",
     _delete("spec.steps"), "spec.steps: Required value"),
]


@pytest.mark.parametrize(("what", "kind", "name", "mutate", "fragment"), REFUSED,
                         ids=[r[0] for r in REFUSED])
async def test_what_shipwright_refuses_is_refused(
    kube: Kube, namespace: str, what: str, kind: str, name: str, mutate: Mutation,
    fragment: str,
) -> None:
    obj = sample(kind, name)
    await create(kube, namespace, obj)  # the sample itself is admitted
    mutate(obj)
    with pytest.raises(ApiError) as err:
        await create(kube, namespace, obj)
    assert err.value.status == 422, (what, err.value)
    assert fragment in err.value.message, (what, err.value.message)


async def test_an_unknown_field_is_refused_under_strict_field_validation(
    kube: Kube, namespace: str
) -> None:
    obj = sample("Build", "kaniko-golang-build")
    obj["spec"]["source"]["git"]["branch"] = "main"  # Shipwright's field is revision
    with pytest.raises(ApiError) as err:
        await create(kube, namespace, obj)
    assert err.value.status == 400, err.value
    assert 'strict decoding error: unknown field "spec.source.git.branch"' in err.value.message


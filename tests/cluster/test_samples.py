"""Shipwright's own samples (samples/v1beta1 at devtools.shipwright.source.VERSION) on the real API
server with our CRDs: every object is admitted with strict field validation and stored as
written, and objects Shipwright's schema (or one of our listed additions,
devtools/crds/crd_differences.py) refuses are refused, each with the error that says why. A
second API server with Shipwright's own CRDs checks each claim about Shipwright: it admits
the samples and the valid variants, and refuses the same variants, except those only our
rules refuse.

Objects are created with dryRun=All: each goes through the whole admission chain (schema,
defaults, CEL rules, strict field validation) and nothing is stored, so the samples that
share a name (three Builds are called buildah-golang-build) and the cluster-scoped
strategies cannot collide with each other or with other tests.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import yaml

from controller.runtime.kube import JSON, ApiError, Kube, Resource, load_api_client
from devtools.cluster.localcluster import LocalCluster
from devtools.shipwright import source as shipwright

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


@pytest.fixture(scope="module")
async def theirs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Kube]:
    """A second API server with Shipwright's own CRDs (from the module cache), and a
    namespace "samples" on it: the reference our answers are checked against."""
    cluster = LocalCluster(tmp_path_factory.mktemp("shipwright-crds"))
    try:
        await cluster.start_bare()
        await cluster.apply_crds([shipwright.crds_dir()])
        kube = Kube(await load_api_client(str(cluster.kubeconfig)))
        try:
            await kube.request("POST", "/api/v1/namespaces", body={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "samples"}})
            yield kube
        finally:
            await kube.close()
    finally:
        cluster.stop()


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
# the API server's answer that names it. Most are Shipwright's own schema; the strategy
# kind, source type, env, timestamp and trigger cases are our rules
# (devtools/crds/crd_differences.py), for what Shipwright's Build validation refuses after
# admission, in its words.
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
    ("env var without name", "Build", "kaniko-golang-build",
     _set("spec.env", [{"name": "", "value": "x"}]),
     "name for environment variable must not be blank"),
    ("env var with value and valueFrom", "BuildRun", "kaniko-golang-buildrun",
     _set("spec.env", [{"name": "A", "value": "x",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
     "only one of value or valueFrom must be specified"),
    ("output timestamp neither keyword nor number", "Build", "kaniko-golang-build",
     _set("spec.output.timestamp", "yesterday"), "output timestamp value is invalid"),
    ("trigger of an unknown type", "Build", "kaniko-golang-build",
     _set("spec.trigger", {"when": [{"name": "nightly", "type": "Cron"}]}),
     "contains an invalid type"),
    ("GitHub trigger without events", "Build", "kaniko-golang-build",
     _set("spec.trigger", {"when": [{"name": "push", "type": "GitHub"}]}),
     "is missing required attribute `.github.events`"),
    ("Pipeline trigger with name and selector", "Build", "kaniko-golang-build",
     _set("spec.trigger", {"when": [{"name": "p", "type": "Pipeline", "objectRef": {
         "name": "p", "selector": {"a": "b"}, "status": ["Succeeded"]}}]}),
     "needs exactly one of `.objectRef.name` and `.objectRef.selector`"),
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
    *[(f"embedded spec with retention.{field}", "BuildRun", "kaniko-golang-buildrun",
       _set("spec.build", {"spec": {"source": {"type": "Git", "git": {"url": "https://x"}},
                                    "strategy": {"name": "kaniko"}, "output": {"image": "x"},
                                    "retention": {field: value}}}),
       "an embedded build spec has none")
      for field, value in (("failedLimit", 1), ("succeededLimit", 1), ("atBuildDeletion", True))],
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


# The REFUSED cases that only our rules refuse; Shipwright's CRDs refuse all the others.
OURS = {"type Git with an OCI artifact", "type OCI without an OCI artifact",
        "empty type with a source", "unknown strategy kind", "env var without name",
        "env var with value and valueFrom", "output timestamp neither keyword nor number",
        "trigger of an unknown type", "GitHub trigger without events",
        "Pipeline trigger with name and selector", "embedded spec with retention.failedLimit",
        "embedded spec with retention.succeededLimit",
        "embedded spec with retention.atBuildDeletion"}


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


def test_our_rules_name_refused_cases() -> None:
    unknown = OURS - {r[0] for r in REFUSED}
    assert not unknown, unknown


async def test_shipwrights_crds_admit_every_sample(theirs: Kube) -> None:
    refused = []
    for file, obj in samples():
        try:
            await create(theirs, "samples", obj)
        except ApiError as err:
            refused.append(f"{file}: {err}"[:400])
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize(("what", "kind", "name", "mutate", "fragment"), REFUSED,
                         ids=[r[0] for r in REFUSED])
async def test_shipwrights_crds_refuse_the_same_except_for_our_rules(
    theirs: Kube, what: str, kind: str, name: str, mutate: Mutation, fragment: str,
) -> None:
    obj = sample(kind, name)
    mutate(obj)
    if what in OURS:  # Shipwright's Build validation refuses it after admission
        await create(theirs, "samples", obj)
        return
    with pytest.raises(ApiError) as err:
        await create(theirs, "samples", obj)
    assert err.value.status == 422, (what, err.value)
    assert fragment in err.value.message, (what, err.value.message)


# Valid uses of the fields our rules look at, so that the rules refuse only what Shipwright's
# validation refuses.
ADMITTED: list[tuple[str, str, str, Mutation]] = [
    ("env var from a field", "Build", "kaniko-golang-build",
     _set("spec.env", [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                       {"name": "B", "value": ""}, {"name": "C", "value": "c"}])),
    ("numeric timestamp", "Build", "kaniko-golang-build",
     _set("spec.output.timestamp", "1691650396")),
    ("timestamp keyword", "BuildRun", "kaniko-golang-buildrun",
     _set("spec.output", {"image": "x", "timestamp": "SourceTimestamp"})),
    ("triggers of every type", "Build", "kaniko-golang-build", _set("spec.trigger", {
        "triggerSecret": "webhook-token", "when": [
        {"name": "push", "type": "GitHub", "github": {"events": ["Push"], "branches": ["main"]}},
        {"name": "base", "type": "Image", "image": {"names": ["ghcr.io/x/base:latest"]}},
        {"name": "p1", "type": "Pipeline", "objectRef": {"name": "p", "status": ["Succeeded"]}},
        {"name": "p2", "type": "Pipeline",
         "objectRef": {"selector": {"app": "x"}, "status": ["Succeeded"]}},
    ]})),
    ("OCI source", "Build", "kaniko-golang-build",
     _set("spec.source", {"type": "OCI", "ociArtifact": {"image": "ghcr.io/x/src:1"}})),
    ("Local source", "Build", "kaniko-golang-build",
     _set("spec.source", {"type": "Local", "local": {"name": "l", "timeout": "1m"}})),
    ("no source", "Build", "kaniko-golang-build", _delete("spec.source")),
    ("unknown source type", "Build", "kaniko-golang-build", _set("spec.source.type", "Svn")),
]


@pytest.mark.parametrize(("what", "kind", "name", "mutate"), ADMITTED,
                         ids=[a[0] for a in ADMITTED])
async def test_what_shipwright_admits_near_our_rules_is_admitted(
    kube: Kube, theirs: Kube, namespace: str, what: str, kind: str, name: str,
    mutate: Mutation,
) -> None:
    obj = sample(kind, name)
    mutate(obj)
    stored = await create(kube, namespace, obj)
    assert missing(obj["spec"], stored["spec"], ".spec") == [], what
    await create(theirs, "samples", obj)  # and Shipwright's CRDs admit it too


async def test_an_unknown_field_is_refused_under_strict_field_validation(
    kube: Kube, namespace: str
) -> None:
    obj = sample("Build", "kaniko-golang-build")
    obj["spec"]["source"]["git"]["branch"] = "main"  # Shipwright's field is revision
    with pytest.raises(ApiError) as err:
        await create(kube, namespace, obj)
    assert err.value.status == 400, err.value
    assert 'strict decoding error: unknown field "spec.source.git.branch"' in err.value.message



async def test_a_sample_buildrun_can_only_be_canceled_once_created(
    kube: Kube, namespace: str
) -> None:
    obj = sample("BuildRun", "kaniko-golang-buildrun")
    resource = RESOURCES[(obj["apiVersion"], obj["kind"])]
    await kube.request("POST", resource.path(namespace), query={"fieldValidation": "Strict"},
                       body=obj)
    name = obj["metadata"]["name"]
    for change in ({"serviceAccount": "other"}, {"env": [{"name": "A", "value": "a"}]},
                   {"build": {"name": "other"}}, {"nodeSelector": {"a": "b"}}):
        with pytest.raises(ApiError) as err:
            await kube.patch(resource, namespace, name, {"spec": change})
        assert err.value.status == 422, change
        assert "is immutable: create a new BuildRun" in err.value.message, err.value.message
    canceled = await kube.patch(resource, namespace, name, {"spec": {"state": "BuildRunCanceled"}})
    assert canceled["spec"]["state"] == "BuildRunCanceled"

"""A cluster whose Shipwright CRDs still list v1alpha1 in status.storedVersions (issue 25,
part 3), on an API server of its own (the CRDs are replaced here).

Shipwright v0.20 stores v1beta1 and serves v1alpha1 beside it through its conversion
webhook; a cluster that ran Shipwright before v0.12 stored v1alpha1 too, and its CRDs
still say so. We serve v1beta1 only (docs/v1alpha1.md says
why), so: the API server refuses our CRDs over those, our controller refuses to start
on them with one line, and after `buildrun-controller migrate-storage`
(controller/commands/migrate.py: every object written back as v1beta1, v1alpha1
dropped from storedVersions) both go through. What is stored is read from etcd itself.

Shipwright's conversion webhook does not run here (its server reads its certificates
from a fixed /etc path), so the CRDs that stored v1alpha1 are Shipwright's names and
versions with schemas that keep every field and conversion None: a v1alpha1 object
reads as v1beta1 unchanged but for its apiVersion, which is all the migration needs.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml

from controller.app import App
from controller.runtime.kube import JSON, ApiError, ConfigError, Kube, Resource, load_api_client
from controller.shipwright import crds
from controller.shipwright.crds import CRDS, KINDS, crd_name
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster.localcluster import LocalCluster, free_port
from devtools.hack import REPO
from devtools.shipwright import controller as shipwright_controller
from tests.harness import controller_settings, wait_for

pytestmark = pytest.mark.cluster

NS = "default"
BUILDRUNS_CRD = "buildruns.shipwright.io"
# Written by the API server (k8s.io/apiextensions-apiserver validation), quoted in docs/v1alpha1.md.
REFUSED = ('CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: '
           'status.storedVersions[0]: Invalid value: "v1alpha1": missing from spec.versions; '
           "v1alpha1 was previously a storage version, and must remain in spec.versions "
           "until a storage migration ensures no data remains persisted in v1alpha1 and "
           "removes v1alpha1 from status.storedVersions")
# The controller's refusal for the first CRD it checks, whole (controller/shipwright/crds.py).
REFUSAL = ("CRD builds.shipwright.io lists v1alpha1 in status.storedVersions: objects may "
           "still be stored as v1alpha1, which this controller does not serve; run "
           "`buildrun-controller migrate-storage` while Shipwright's CRDs and conversion "
           "webhook still serve, then apply manifests/crds "
           '(docs/v1alpha1.md)')


@pytest.fixture
async def bare(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        await cluster.start_bare()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def kube(bare: LocalCluster) -> AsyncIterator[Kube]:
    client = Kube(await load_api_client(str(bare.kubeconfig)))
    try:
        yield client
    finally:
        await client.close()


def shipwrights(storage: str, *, schemaless: bool = False) -> list[JSON]:
    """Shipwright's four CRDs (its conversion webhook left out: it does not run here),
    with `storage` the version objects are stored as; `schemaless`: every field kept."""
    found = []
    for crd in shipwright_controller.crds(conversion=False):
        for version in crd["spec"]["versions"]:
            version["storage"] = version["name"] == storage
            if schemaless:
                version["schema"] = {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": True}}
        found.append(crd)
    assert sorted(c["metadata"]["name"] for c in found) == sorted(crds.NAMES)
    return found


def ours() -> list[JSON]:
    return [yaml.safe_load((REPO / "manifests" / "crds" / f"shipwright.io_{kind.plural}.yaml")
                           .read_text()) for kind in KINDS]


async def apply_crd(kube: Kube, crd: JSON) -> JSON:
    """A server-side apply of `crd`, by the controller's client (its ApiError parsed)."""
    return await kube.request(
        "PATCH", CRDS.path(None, crd["metadata"]["name"]), body=crd,
        query={"fieldManager": "test", "force": "true"},
        content_type="application/apply-patch+yaml")


async def apply_all(cluster: LocalCluster, objs: list[JSON]) -> None:
    for obj in objs:
        await cluster.apply(obj)
    await cluster.wait_crds_established()


def at(kind: Resource, version: str) -> Resource:
    return Resource(kind.group, version, kind.plural, kind.kind, kind.namespaced)


async def served(call: Callable[[], Awaitable[JSON]]) -> JSON:
    """`call`'s answer once the API server serves the version (404, then 429 "storage is
    (re)initializing", for a moment after a CRD is established or its storage moved)."""
    answer: JSON = {}

    async def answered() -> bool:
        nonlocal answer
        try:
            answer = await call()
        except ApiError as exc:
            if exc.status not in (404, 429):
                raise
            return False
        return True

    await wait_for(answered, what="the version to be served")
    return answer


async def stored(cluster: LocalCluster) -> dict[str, str]:
    """`kind/namespace/name` -> the apiVersion each Shipwright object is stored as in etcd
    (custom resources are stored as JSON)."""
    prefix = b"/registry/shipwright.io/"
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    async with aiohttp.ClientSession() as session, session.post(
            f"{cluster.etcd_url}/v3/kv/range",
            json={"key": base64.b64encode(prefix).decode(),
                  "range_end": base64.b64encode(end).decode()}) as resp:
        resp.raise_for_status()
        kvs = (await resp.json()).get("kvs") or []
    return {base64.b64decode(kv["key"])[len(prefix):].decode():
            orjson.loads(base64.b64decode(kv["value"]))["apiVersion"] for kv in kvs}


async def stored_versions(kube: Kube) -> dict[str, list[str]]:
    return {name: (await kube.get(CRDS, None, name))["status"]["storedVersions"]
            for name in crds.NAMES}


async def starts(cluster: LocalCluster) -> None:
    """App.create runs the start-up check; the App is closed again at once."""
    app = await App.create(controller_settings(cluster, NS), "test")
    await app.kube.close()


async def cli(*args: str) -> tuple[int, str, str]:
    """`python -m controller ARGS`: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "controller", *args, cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def v1alpha1_objects() -> list[tuple[Resource, JSON]]:
    """One object of each kind as Shipwright v0.11 wrote them, and two more BuildRuns
    (three BuildRuns: two pages at the test's page size)."""
    def obj(kind: Resource, name: str, spec: JSON) -> tuple[Resource, JSON]:
        return at(kind, "v1alpha1"), {"apiVersion": "shipwright.io/v1alpha1", "kind": kind.kind,
                                      "metadata": {"name": name}, "spec": spec}

    builds, buildruns, strategies, cluster_strategies = KINDS
    steps = {"buildSteps": [{"name": "build", "image": "busybox"}]}
    return [
        obj(builds, "b", {"source": {"url": "https://github.com/shipwright-io/sample-go"},
                          "strategy": {"name": "s", "kind": "BuildStrategy"},
                          "output": {"image": "registry.example/b"}}),
        *(obj(buildruns, f"old-{i}", {"buildRef": {"name": "b"}}) for i in range(3)),
        obj(strategies, "s", steps),
        obj(cluster_strategies, "cs", steps),
    ]


async def test_a_cluster_that_stored_v1alpha1_is_refused_until_migrated(
        bare: LocalCluster, kube: Kube) -> None:
    # Shipwright before v0.12 stored v1alpha1; v0.12 to v0.20 store v1beta1.
    await apply_all(bare, shipwrights("v1alpha1", schemaless=True))
    for kind, body in v1alpha1_objects():
        await served(partial(kube.create, kind, NS, body))
    old = await kube.get(at(BUILDRUNS, "v1alpha1"), NS, "old-0")
    await kube.patch(at(BUILDRUNS, "v1alpha1"), NS, "old-0", {"status": {"reason": "Pending"}},
                     subresource="status")
    await apply_all(bare, shipwrights("v1beta1", schemaless=True))
    # One written after the switch is stored as v1beta1 already.
    newer = await served(lambda: kube.create(BUILDRUNS, NS, {
        "apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
        "metadata": {"name": "newer"}, "spec": {"build": {"name": "b"}}}))
    before = await stored(bare)
    assert before == {"builds/default/b": "shipwright.io/v1alpha1",
                      **{f"buildruns/default/old-{i}": "shipwright.io/v1alpha1"
                         for i in range(3)},
                      "buildruns/default/newer": "shipwright.io/v1beta1",
                      "buildstrategies/default/s": "shipwright.io/v1alpha1",
                      "clusterbuildstrategies/cs": "shipwright.io/v1alpha1"}
    assert set(map(tuple, (await stored_versions(kube)).values())) == {("v1alpha1", "v1beta1")}

    # The API server refuses our CRDs over them, and says why.
    for crd in ours():
        with pytest.raises(ApiError) as refused:
            await apply_crd(kube, crd)
        assert (refused.value.status, refused.value.reason) == (422, "Invalid")
        assert refused.value.message == REFUSED.format(name=crd["metadata"]["name"])

    # Our controller refuses to start on them: one line, exit 2, no traceback.
    with pytest.raises(ConfigError) as line:
        await starts(bare)
    assert str(line.value) == REFUSAL
    code, out, err = await cli("--kubeconfig", str(bare.kubeconfig))
    assert (code, out, err) == (2, "", f"buildrun-controller: {REFUSAL}\n")

    # The migration, as docs/v1alpha1.md gives it (two pages of BuildRuns).
    code, out, err = await cli("migrate-storage", "--kubeconfig", str(bare.kubeconfig),
                               "--chunk-size", "2")
    assert (code, err) == (0, ""), err
    prog = "buildrun-controller migrate-storage"
    assert out.splitlines() == [
        f"{prog}: {name}: rewrote {count} object(s) as v1beta1; storedVersions "
        f"['v1alpha1', 'v1beta1'] -> ['v1beta1']"
        for name, count in zip(crds.NAMES, (1, 4, 1, 1), strict=True)]
    assert set((await stored(bare)).values()) == {"shipwright.io/v1beta1"}
    assert await stored_versions(kube) == {name: ["v1beta1"] for name in crds.NAMES}
    # Unchanged: status kept; the object already stored as v1beta1 was not written again.
    migrated = await kube.get(BUILDRUNS, NS, "old-0")
    assert migrated["spec"] == old["spec"] and migrated["status"] == {"reason": "Pending"}
    assert (await kube.get(BUILDRUNS, NS, "newer"))["metadata"]["resourceVersion"] == \
        newer["metadata"]["resourceVersion"]

    # A second run has nothing to do.
    code, out, err = await cli("migrate-storage", "--kubeconfig", str(bare.kubeconfig))
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"{prog}: {name}: storedVersions is already [v1beta1]; "
                                "nothing to do" for name in crds.NAMES]

    # Now our CRDs go on, the controller starts, and every object reads back.
    await apply_all(bare, ours())
    await starts(bare)
    for kind in KINDS:
        listed = await served(partial(kube.list, kind, None))
        assert len(listed["items"]) == {"buildruns": 4}.get(kind.plural, 1)

    # A client that still speaks v1alpha1 is refused (404: the version is not served),
    # once the API server has taken our CRDs in; it is not misread.
    async def refused_v1alpha1() -> bool:
        try:
            await kube.list(at(BUILDRUNS, "v1alpha1"), NS)
        except ApiError as exc:
            return exc.status == 404
        return False

    await wait_for(refused_v1alpha1, what="v1alpha1 to be gone")
    with pytest.raises(ApiError) as bad:
        await kube.create(BUILDRUNS, NS, {
            "apiVersion": "shipwright.io/v1alpha1", "kind": "BuildRun",
            "metadata": {"name": "x"}, "spec": {"buildRef": {"name": "b"}}})
    assert bad.value.status == 400
    assert bad.value.message == ("the API version in the data (shipwright.io/v1alpha1) does "
                                 "not match the expected API version (shipwright.io/v1beta1)")


async def test_dropping_v1alpha1_from_storedversions_without_the_rewrite_breaks_the_kind(
        bare: LocalCluster, kube: Kube) -> None:
    """Why the migration rewrites every object first: patching storedVersions alone lets
    our CRDs on, and then what is still stored as v1alpha1 cannot be read at all."""
    await apply_all(bare, shipwrights("v1alpha1", schemaless=True))
    kind, body = v1alpha1_objects()[1]
    await served(lambda: kube.create(kind, NS, body))
    await apply_all(bare, shipwrights("v1beta1", schemaless=True))
    await kube.patch(CRDS, None, BUILDRUNS_CRD, {"status": {"storedVersions": ["v1beta1"]}},
                     subresource="status")
    await apply_all(bare, [c for c in ours() if c["metadata"]["name"] == BUILDRUNS_CRD])

    async def unreadable() -> ApiError | None:
        try:
            await kube.get(BUILDRUNS, NS, "old-0")
        except ApiError as exc:
            return exc if exc.status == 500 else None
        return None

    error = await wait_for(unreadable, what="the object to be unreadable")
    assert error.message == ("request to convert CR from an invalid group/version: "
                             "shipwright.io/v1alpha1")
    with pytest.raises(ApiError) as listed:
        await kube.list(BUILDRUNS, NS)
    assert listed.value.status == 429
    assert "storage is (re)initializing" in listed.value.message
    # And the start-up check cannot see it: the CRD itself looks migrated.
    assert crds.problem(await kube.get(CRDS, None, BUILDRUNS_CRD)) is None


async def test_shipwrights_crds_with_their_conversion_webhook_are_refused(
        bare: LocalCluster, kube: Kube) -> None:
    crd = next(c for c in shipwrights("v1beta1") if c["metadata"]["name"] == BUILDRUNS_CRD)
    crd["spec"]["conversion"] = {
        "strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "shipwright-build",
                                         "name": "shp-build-webhook", "path": "/convert"}}}}
    await apply_all(bare, [crd])
    with pytest.raises(ConfigError, match=r"converts through a webhook \(Webhook\)"):
        await starts(bare)
    # Nothing stored as another version, so the migration has nothing to do here.
    code, out, _ = await cli("migrate-storage", "--kubeconfig", str(bare.kubeconfig))
    assert code == 0
    assert f"{BUILDRUNS_CRD}: storedVersions is already [v1beta1]; nothing to do" in out


async def test_the_migration_stops_in_one_line_where_it_cannot_go_on(
        bare: LocalCluster, kube: Kube) -> None:
    """A CRD that still stores v1alpha1 (Shipwright before v0.12) is refused before any
    write. Objects stored as v1alpha1 are read as v1beta1 through the CRD's conversion
    webhook: with none listening, the migration says so, exits 1 and leaves storedVersions."""
    prog = "buildrun-controller migrate-storage"
    await apply_all(bare, shipwrights("v1alpha1", schemaless=True))
    kind, body = v1alpha1_objects()[1]
    await served(partial(kube.create, kind, NS, body))
    code, out, err = await cli("migrate-storage", "--kubeconfig", str(bare.kubeconfig))
    assert (code, out, err) == (1, "", f"{prog}: CRD builds.shipwright.io stores v1alpha1, not "
                                "v1beta1: a rewrite would store it again; install Shipwright "
                                "v0.12 or later first\n")

    switched = shipwrights("v1beta1", schemaless=True)
    crd = next(c for c in switched if c["metadata"]["name"] == BUILDRUNS_CRD)
    crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/convert"}}}
    await apply_all(bare, switched)
    code, out, err = await cli("migrate-storage", "--kubeconfig", str(bare.kubeconfig))
    assert code == 1, (out, err)
    assert out.splitlines() == [f"{prog}: builds.shipwright.io: rewrote 0 object(s) as v1beta1; "
                                "storedVersions ['v1alpha1', 'v1beta1'] -> ['v1beta1']"], out
    [line] = err.splitlines()
    assert line.startswith(
        f"{prog}: {BUILDRUNS_CRD}: cannot list them as v1beta1: "
        "500 conversion webhook for shipwright.io/v1alpha1, Kind=BuildRun failed: "), line
    assert line.endswith("(Shipwright's conversion webhook must run while migrating); "
                         "storedVersions left as ['v1alpha1', 'v1beta1']"), line
    assert (await stored_versions(kube)) == {
        "builds.shipwright.io": ["v1beta1"], BUILDRUNS_CRD: ["v1alpha1", "v1beta1"],
        "buildstrategies.shipwright.io": ["v1alpha1", "v1beta1"],
        "clusterbuildstrategies.shipwright.io": ["v1alpha1", "v1beta1"]}


def test_the_migration_covers_the_crds_the_controller_checks() -> None:
    assert [crd_name(kind) for kind in KINDS] == list(crds.NAMES)
    assert crds.NAMES == ("builds.shipwright.io", "buildruns.shipwright.io",
                          "buildstrategies.shipwright.io",
                          "clusterbuildstrategies.shipwright.io")


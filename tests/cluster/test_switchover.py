"""Switching a cluster from Shipwright's controller to ours and back, mid-flight, on the
session's real-Tekton stack (issue 26). README "Switching from Shipwright" is the
procedure this follows; devtools/cluster/shipwright_controller.py runs Shipwright
v0.20.13's own controller (built in setup by `make peer-build`) and reads its CRDs from
the Go module cache.

The CRDs. Shipwright installs with `kubectl apply --server-side` (its README; its
BuildRun CRD is 1 MB, so a client-side apply is refused: "metadata.annotations: Too
long: may not be more than 262144 bytes"). Here every CRD apply is one server-side
apply under one field manager (the stack's, standing for kubectl's), so Shipwright's
replace ours whole and ours replace Shipwright's whole, as `kubectl apply --server-side
--force-conflicts -k manifests/` over Shipwright's install does. What the test checks
happens then (`crd_shape`):

- `status.storedVersions` stays ["v1beta1"] throughout: Shipwright v0.20 stores
  v1beta1, so dropping its v1alpha1 (ours serve v1beta1 alone) is accepted, and the
  rollback serves v1alpha1 again.
- `spec.conversion`: Shipwright's names its webhook (shipwright-build/shp-build-webhook,
  not running here: every object is stored, and asked for, as v1beta1, so the API
  server never calls it). Ours have no stanza, so the apply drops it (strategy None);
  the rollback brings it back. Our controller started before the apply, on
  Shipwright's CRDs, refuses with one line (ConfigError) instead of running.
- Our CEL rules apply to writes from the apply on; objects already stored are not
  re-checked: a metadata change to a BuildRun Shipwright finished is accepted (its
  unchanged status passes the transition rules), a change of its outcome is refused
  with our message (dry runs, so nothing changes). Under Shipwright's CRDs (no rules)
  the same outcome change is accepted.

Found with kubectl v1.32 against this API server, not tested here (README says what to
do): a client-side `kubectl apply -k manifests/` over Shipwright's server-side install
replaces `versions` (v1alpha1 goes) but leaves Shipwright's conversion webhook, and so
does a server-side apply over CRDs another field manager owns (the Shipwright
operator's); our controller then refuses to start, naming the CRD.

Each way, the outgoing controller leaves BuildRuns finished (succeeded, failed, a user
error: its Build is missing, cancelled while running), running (pods held by kwok) and
one created a moment before it stops; while no controller runs, one running BuildRun is
cancelled and one is created. The incoming one is started, the held pods released,
more BuildRuns created. Invariants: every BuildRun ends exactly once (one version with
`completionTime` among all a watch saw, still the current one at the end: its
resourceVersion and status never change once finished) with its pod's outcome; one
TaskRun per BuildRun, and the TaskRun one controller started is the one the other
finishes (uid); no TaskRun is left running; no traceback in our log nor a Go panic in
Shipwright's (its logger puts a stack trace on every error line, its routine requeues
included, "the Build is not yet validated" and a write cut short by the stop; a panic,
recovered by controller-runtime or not, says "panic"). The watch may miss versions
while a CRD is replaced (the API server ends it and may answer 410); no controller
runs then, so no BuildRun is written.

The second test makes the one state the first cannot make on demand: a TaskRun
Shipwright created but never recorded in the BuildRun's status. Ours adopts it (it
finds the BuildRun's TaskRuns by owner in its cache, Observer._unrecorded_run);
until that fix it made a second TaskRun, and this test was a strict xfail.

The third is the rollback's own risk: a TaskRun ours made, deleted once Shipwright is
back, must still lead Shipwright to its BuildRun (by its name: TaskRunIsMissing).

Shipwright's controller watches every namespace (it has no option to watch fewer) and
runs as admin; ours watches only the test's namespace. The session's CRDs are ours
again when the test ends, however it ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from controller.buildrun import reasons
from controller.buildrun.spec import parse_duration
from controller.runtime.informers import Informer
from controller.runtime.kube import JSON, LEASES, MERGE_PATCH, ApiError, ConfigError, Kube
from controller.shipwright import field_managers
from controller.shipwright.crds import CRDS, NAMES
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import shipwright_controller as sw
from devtools.cluster.fates import FateWebhook
from devtools.cluster.localcluster import REPO, LocalCluster, free_port
from devtools.cluster.webhook import serve_https
from devtools.crds.crdgen import FROZEN_COMPLETION_TIME
from tests.harness import (
    World,
    condition,
    controller_settings,
    in_flight,
    release,
    running_controller,
    running_pod,
    wait_for,
)

pytestmark = pytest.mark.cluster

OUR_CRDS = REPO / "manifests" / "crds"
CANCELED = {"state": "BuildRunCanceled"}
SHIPWRIGHT_WEBHOOK = {"name": "shp-build-webhook", "namespace": "shipwright-build",
                      "path": "/convert", "port": 443}
# A Build of ten minutes whose BuildRun asks for an hour (issue 39 part 4): Shipwright's
# status.buildSpec is the Build's spec, without the BuildRun's own timeout.
SHORT_BUILD = "app-10m"


def rules(crd: JSON) -> int:
    """How many CEL rule lists (x-kubernetes-validations) the CRD's schemas carry."""
    return json.dumps(crd["spec"]).count('"x-kubernetes-validations"')


def shipwrights_shape() -> dict[str, dict[str, Any]]:
    """`crd_shape` under Shipwright's CRDs (which carry no CEL rules)."""
    return {crd["metadata"]["name"]: {
        "versions": ["v1alpha1", "v1beta1"], "storedVersions": ["v1beta1"],
        "conversion": "Webhook", "webhook": SHIPWRIGHT_WEBHOOK, "rules": rules(crd)}
        for crd in sw.crds()}


def our_shape() -> dict[str, dict[str, Any]]:
    """`crd_shape` under ours: v1beta1 alone, no conversion, our rules."""
    out = {}
    for path in sorted(OUR_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["metadata"]["name"]] = {
            "versions": ["v1beta1"], "storedVersions": ["v1beta1"],
            "conversion": "None", "webhook": None, "rules": rules(crd)}
    return out


async def crd_shape(kube: Kube) -> dict[str, dict[str, Any]]:
    """Per CRD: served versions, storedVersions, conversion, how many CEL rule lists."""
    out = {}
    for name in NAMES:
        crd = await kube.get(CRDS, None, name)
        conversion = crd["spec"].get("conversion") or {}
        webhook = ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("service")
        out[name] = {"versions": [v["name"] for v in crd["spec"]["versions"] if v["served"]],
                     "storedVersions": crd["status"]["storedVersions"],
                     "conversion": conversion.get("strategy"), "webhook": webhook,
                     "rules": rules(crd)}
    return out


async def dry_run(w: World, name: str, body: JSON, subresource: str = "") -> str:
    """"accepted", or the API server's refusal, of a merge patch not persisted."""
    try:
        await w.kube.request("PATCH", BUILDRUNS.path(w.ns, name, subresource),
                             query={"dryRun": "All"}, body=body, content_type=MERGE_PATCH)
    except ApiError as exc:
        return f"{exc.status} {exc.message}"
    return "accepted"


class Switch:
    """The two controllers and the CRDs that go with each, on the session's stack."""

    def __init__(self, cluster: LocalCluster, w: World, logs: Path) -> None:
        self.cluster = cluster
        self.w = w
        self.logs = logs
        self.panics: list[str] = []
        self.runs = 0

    @contextlib.asynccontextmanager
    async def shipwright(self) -> AsyncIterator[None]:
        """Its CRDs as its release.yaml puts them (a rollback re-applies them), then its
        controller; stopped at the end with SIGTERM, as scaling its Deployment to 0."""
        await sw.apply_crds(self.cluster, sw.crds())
        assert await crd_shape(self.w.kube) == shipwrights_shape()
        self.runs += 1
        ctl = sw.ShipwrightController(self.cluster.kubeconfig,
                                      self.logs / f"shipwright-{self.runs}.log",
                                      lease_seconds=6)
        try:
            async with ctl:
                yield
        finally:
            if (panic := ctl.panic()) is not None:
                self.panics.append(panic)

    @contextlib.asynccontextmanager
    async def ours(self) -> AsyncIterator[None]:
        """Our CRDs applied over Shipwright's (step 2 of the switch), then our controller
        (in-process, watching the test's namespace) until the block ends (SIGTERM's path)."""
        settings = controller_settings(self.cluster, self.w.ns)
        if (await crd_shape(self.w.kube))[NAMES[0]]["conversion"] == "Webhook":
            # Step 2 skipped: ours refuses Shipwright's CRDs, with one line.
            with pytest.raises(ConfigError, match="converts through a webhook"):
                async with running_controller(settings):
                    pass
        await self.cluster.apply_crds([OUR_CRDS])
        assert await crd_shape(self.w.kube) == our_shape()
        async with running_controller(settings):
            yield


class Ledger:
    """What each BuildRun must end as, every version of it a watch saw, and the TaskRun
    each held one ran on."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.want: dict[str, str] = {}
        self.seen: dict[str, list[tuple[str, JSON]]] = {}
        self.taskrun_uid: dict[str, str] = {}
        self.informer = Informer(w.kube, BUILDRUNS, w.ns, watch_timeout=30)
        self.informer.add_handler(self._record)

    def _record(self, kind: str, obj: JSON, old: JSON | None, initial: bool) -> None:
        if kind != "DELETED":
            self.seen.setdefault(obj["metadata"]["name"], []).append(
                (obj["metadata"]["resourceVersion"], obj.get("status") or {}))

    async def create(self, name: str, want: str, *, fate: str = "succeed",
                     **spec: Any) -> None:
        if fate != "succeed":
            self.w.fate(name, fate=fate)
        self.want[name] = want
        await self.w.buildrun(name, **spec)

    async def started(self, name: str) -> None:
        """Its pod runs (held): record the TaskRun the current controller made."""
        pod = await running_pod(self.w, name)
        self.taskrun_uid[name] = next(o["uid"] for o in pod["metadata"]["ownerReferences"]
                                      if o["kind"] == "TaskRun")

    async def settle(self, names: list[str]) -> None:
        for name in names:
            await self.w.finished(name, timeout=60)

    async def check(self) -> None:
        taskruns = await self.w.taskruns()
        by_buildrun: dict[str, list[JSON]] = {}
        for tr in taskruns:
            by_buildrun.setdefault(tr["metadata"]["labels"][LABEL_BUILDRUN], []).append(tr)
        for name, want in self.want.items():
            br = await self.w.get(name)
            assert condition(br)["reason"] == want, (name, condition(br))
            finished = [rv for rv, status in self.seen.get(name, [])
                        if status.get("completionTime")]
            assert finished == [br["metadata"]["resourceVersion"]], (name, self.seen[name])
            mine = by_buildrun.get(name, [])
            if want == reasons.BUILD_NOT_FOUND or not br["status"].get("taskRunName"):
                assert mine == [], name  # a user error: never started
                continue
            assert len(mine) == 1, (name, [t["metadata"]["name"] for t in mine])
            assert br["status"]["taskRunName"] == mine[0]["metadata"]["name"], name
            if name in self.taskrun_uid:
                assert mine[0]["metadata"]["uid"] == self.taskrun_uid[name], name

        async def none_running() -> bool:
            return all(condition(tr).get("status") in ("True", "False")
                       for tr in await self.w.taskruns())
        await wait_for(none_running, 30, 0.2, what="every TaskRun to stop")


async def lives_as_long_as_tekton_lets_it(w: World, name: str) -> None:
    """A running BuildRun of a 10-minute Build that asked for an hour is looked at again at
    the backstop of the hour its TaskRun holds (Tekton enforces that one), whoever made
    the run; ours once read the timeout from status.buildSpec, which Shipwright writes
    without the BuildRun's own, and cancelled such a run at about 11 minutes after a
    switch. Its reconcile, on the objects as the API server has them, says when."""
    buildrun = await w.get(name)
    taskrun = await w.kube.get(TASKRUNS, w.ns, buildrun["status"]["taskRunName"])
    assert taskrun["spec"]["timeout"] == "1h0m0s"
    if "buildSpec" in buildrun["status"]:  # both write the Build's spec there
        assert parse_duration(buildrun["status"]["buildSpec"]["timeout"]) == 600
    result = await in_flight(w.kube, (BUILDRUNS, buildrun), (TASKRUNS, taskrun)).reconcile(
        f"{w.ns}/{name}")
    assert result.requeue_after is not None and result.requeue_after > 3000, result


async def one_way(ledger: Ledger, outgoing: Any, incoming: Any, tag: str) -> None:
    """BuildRuns under `outgoing` (entered and left here), then `incoming` takes over."""
    w = ledger.w
    finished = [f"{tag}-ok", f"{tag}-fail", f"{tag}-nobuild", f"{tag}-cancel"]
    long = f"{tag}-held-long"
    held = [f"{tag}-held-ok", f"{tag}-held-fail", f"{tag}-cancel-between"]
    async with outgoing:
        await ledger.create(f"{tag}-ok", reasons.SUCCEEDED)
        await ledger.create(f"{tag}-fail", reasons.FAILED, fate="fail")
        await ledger.create(f"{tag}-nobuild", reasons.BUILD_NOT_FOUND, build={"name": "nope"})
        await ledger.create(long, reasons.SUCCEEDED, fate="hold", build={"name": SHORT_BUILD},
                            timeout="1h")
        for name in [f"{tag}-cancel", *held]:
            want = reasons.FAILED if name.endswith("fail") else (
                reasons.BUILD_RUN_CANCELED if "cancel" in name else reasons.SUCCEEDED)
            await ledger.create(name, want, fate="hold")
        for name in [f"{tag}-cancel", *held, long]:
            await ledger.started(name)
        await w.kube.patch(BUILDRUNS, w.ns, f"{tag}-cancel", {"spec": CANCELED})
        await ledger.settle(finished)
        await ledger.create(f"{tag}-last", reasons.SUCCEEDED)  # a moment before the stop
    # No controller runs: a cancel and a creation wait for the next one.
    await w.kube.patch(BUILDRUNS, w.ns, f"{tag}-cancel-between", {"spec": CANCELED})
    await ledger.create(f"{tag}-between", reasons.SUCCEEDED)
    async with incoming:
        if tag == "sw":  # ours took over a run Shipwright started
            await lives_as_long_as_tekton_lets_it(w, long)
        await release(w, f"{tag}-held-ok")
        await release(w, f"{tag}-held-fail", fate="fail")
        await release(w, long)
        await ledger.create(f"{tag}-after", reasons.SUCCEEDED)
        await ledger.settle([*held, long, f"{tag}-last", f"{tag}-between", f"{tag}-after"])
        await ledger.check()


async def test_shipwright_to_ours_and_back_mid_flight(
    cluster: LocalCluster, kube: Kube, namespace: str, fates: FateWebhook,
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    w = World(kube, namespace, fates)
    switch = Switch(cluster, w, tmp_path)
    ledger = Ledger(w)
    watching = asyncio.create_task(ledger.informer.run())
    marks = [("start", time.monotonic())]
    try:
        await sw.apply_crds(cluster, sw.crds())  # a cluster that runs Shipwright
        await w.strategy()
        await w.build()
        await w.build(SHORT_BUILD, timeout="10m")
        await ledger.informer.wait_synced()
        marks.append(("Shipwright's CRDs", time.monotonic()))
        await one_way(ledger, switch.shipwright(), switch.ours(), "sw")
        marks.append(("Shipwright -> ours", time.monotonic()))
        # Our rules on a BuildRun Shipwright finished: a metadata change passes (its
        # status is not re-checked), its outcome is frozen from now on.
        outcome_change = {"status": {"completionTime": "2000-01-01T00:00:00Z"}}
        assert await dry_run(w, "sw-ok", {"metadata": {"labels": {"x": "y"}}}) == "accepted"
        assert FROZEN_COMPLETION_TIME in await dry_run(w, "sw-ok", outcome_change, "status")
        # Ours -> Shipwright (the rollback): its CRDs go back on first.
        await one_way(ledger, switch.ours(), switch.shipwright(), "us")
        await ledger.check()  # the first way's BuildRuns, after the second switch
        marks.append(("ours -> Shipwright", time.monotonic()))
        # Shipwright's CRDs carry no rules: the same change would pass again.
        assert await dry_run(w, "sw-ok", outcome_change, "status") == "accepted"
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await cluster.apply_crds([OUR_CRDS])  # the session's CRDs, as the stack has them
    marks.append(("our CRDs back", time.monotonic()))
    print("\nswitch-over phases (s):", ", ".join(
        f"{name} {end - start:.1f}" for (_, start), (name, end) in itertools.pairwise(marks)))
    assert await crd_shape(kube) == our_shape()
    tracebacks = [r.getMessage() for r in caplog.records
                  if r.exc_info or "Traceback" in r.getMessage()]
    assert tracebacks == [], tracebacks
    assert switch.panics == []


@contextlib.asynccontextmanager
async def taskrun_names_refused(cluster: LocalCluster, w: World,
                                buildrun: str) -> AsyncIterator[None]:
    """A validating admission webhook (real, on the API server) that refuses every status
    write naming a TaskRun for `buildrun`: the write that records Shipwright's TaskRun
    fails, as one cut short by a stop would not happen. Active once a dry run is refused."""
    name = f"no-taskrun-name-{w.ns}.buildrun-controller.test"
    port = free_port()

    async def review(request: web.Request) -> web.Response:
        req = (await request.json())["request"]
        status = req["object"].get("status") or {}
        named = req["name"] == buildrun and (status.get("taskRunName") or status.get("executor"))
        return web.json_response({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": req["uid"], "allowed": not named,
                         "status": {"code": 403, "message": "TaskRun name refused"}}})

    runner = await serve_https(cluster.ca, port, "/validate", review,
                               Path(tempfile.mkdtemp(prefix="webhook-")))
    path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}"
    try:
        await cluster.apply({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [{
                "name": name,
                "clientConfig": {"url": f"https://127.0.0.1:{port}/validate",
                                 "caBundle": base64.b64encode(cluster.ca.cert_pem).decode()},
                "rules": [{"apiGroups": ["shipwright.io"], "apiVersions": ["v1beta1"],
                           "operations": ["UPDATE"], "resources": ["buildruns/status"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": w.ns}},
                "failurePolicy": "Fail", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 5}]})
        probe = {"status": {"taskRunName": "probe"}}

        async def refused() -> bool:
            return await dry_run(w, buildrun, probe, "status") != "accepted"
        await wait_for(refused, 30, 0.1, what="the webhook to refuse a TaskRun name")
        yield
    finally:
        with contextlib.suppress(RuntimeError):
            await cluster.request("DELETE", path)
        await runner.cleanup()


async def test_a_taskrun_shipwright_never_recorded_is_adopted(
    cluster: LocalCluster, kube: Kube, namespace: str, fates: FateWebhook, tmp_path: Path,
) -> None:
    """Shipwright creates a BuildRun's TaskRun, then writes its name into the BuildRun's
    status; a failed write it ignores, and a controller stopped between the two leaves a
    TaskRun no status names (its buildrun.go says so: "risk is that when the controller
    is now restarted before the field is set, another TaskRun will be created"; its own
    restart adopts it through its TaskRun watch, by the TaskRun's labels). Made here for
    real: an admission webhook refuses every status write that names a TaskRun for this
    BuildRun while Shipwright's controller runs (its earlier status writes pass). Ours,
    started after it, must run the BuildRun on that TaskRun: one TaskRun (Shipwright's,
    same uid), recorded, finished with its outcome."""
    w = World(kube, namespace, fates)
    try:
        await sw.apply_crds(cluster, sw.crds())
        await w.strategy()
        await w.build()
        w.fate("unrecorded", fate="hold")
        await w.buildrun("unrecorded")
        async with taskrun_names_refused(cluster, w, "unrecorded"), \
                sw.ShipwrightController(cluster.kubeconfig, tmp_path / "shipwright.log",
                                        lease_seconds=6):
            pod = await running_pod(w, "unrecorded")
        theirs = next(o for o in pod["metadata"]["ownerReferences"] if o["kind"] == "TaskRun")
        # The state this test is about; not an AssertionError, which the xfail expects.
        if ((await w.get("unrecorded")).get("status") or {}).get("taskRunName"):
            raise RuntimeError("Shipwright recorded its TaskRun after all")
        await cluster.apply_crds([OUR_CRDS])
        async with running_controller(controller_settings(cluster, namespace)):
            recorded = await w.taskrun_of("unrecorded", timeout=30)
            assert [t["metadata"]["uid"] for t in await w.taskruns()] == [theirs["uid"]]
            assert recorded == theirs["name"]
            await release(w, "unrecorded")
            done = await w.finished("unrecorded", timeout=60)
            assert condition(done)["reason"] == reasons.SUCCEEDED
    finally:
        await cluster.apply_crds([OUR_CRDS])


async def test_after_a_rollback_shipwright_finds_the_buildrun_of_a_deleted_taskrun(
    cluster: LocalCluster, kube: Kube, namespace: str, fates: FateWebhook, tmp_path: Path,
) -> None:
    """The rollback as an operator makes it: ours runs builds, Shipwright takes over
    (its CRDs, then its controller), and a running TaskRun ours made is deleted.
    Shipwright finds its BuildRun by the TaskRun's name alone (VerifyRequestName strips
    `-[a-z0-9]{5}$`) and fails it TaskRunIsMissing; the other one it finishes as its own.
    With ours' earlier names (an 8-hex hash) the BuildRun stayed Running for good.

    Shipwright's Lease is written under the field manager the API server makes of its
    binary's User-Agent, the one ours names for its own Lease and Events
    (controller.shipwright.field_managers.BUILD_CONTROLLER)."""
    w = World(kube, namespace, fates)
    for name in ("deleted", "kept"):
        w.fate(name, fate="hold")
    try:
        await w.strategy()
        await w.build()
        async with running_controller(controller_settings(cluster, namespace)):
            for name in ("deleted", "kept"):
                await w.buildrun(name)
                await running_pod(w, name)
        ours = {name: (await w.get(name))["status"]["taskRunName"] for name in ("deleted", "kept")}
        await sw.apply_crds(cluster, sw.crds())
        async with sw.ShipwrightController(cluster.kubeconfig, tmp_path / "shipwright.log",
                                           lease_seconds=6):
            # Shipwright runs a new BuildRun: it leads and its informers have synced, so
            # it will see the deletion.
            await w.buildrun("probe")
            await w.finished("probe", 60)
            await kube.delete(TASKRUNS, namespace, ours["deleted"])

            async def missing() -> JSON | None:
                br = await w.get("deleted")
                return br if condition(br).get("reason") == reasons.TASK_RUN_IS_MISSING else None
            deleted = await wait_for(missing, 60, 0.2, what="Shipwright's TaskRunIsMissing")
            await release(w, "kept")
            kept = await w.finished("kept", 60)
            lease = await kube.get(LEASES, "default", "shipwright-build-controller-lock")
    finally:
        await cluster.apply_crds([OUR_CRDS])
    cond = condition(deleted)
    assert (cond["status"], cond["message"]) == (
        "False", f"taskRun {ours['deleted']} doesn't exist"), cond
    assert condition(kept)["reason"] == reasons.SUCCEEDED, condition(kept)
    assert kept["status"]["taskRunName"] == ours["kept"]
    assert {e["manager"] for e in lease["metadata"]["managedFields"]} == {
        field_managers.BUILD_CONTROLLER}

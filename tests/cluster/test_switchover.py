"""Switching a cluster from Shipwright's controller to ours and back, mid-flight, on real
Tekton (issue 26). README "Switching from Shipwright" is the procedure this follows.

A stack of its own (the switch replaces the CRDs, which the session's stack keeps as
ours): Shipwright v0.20.13's CRDs and its own controller (`hack/peer/build`, built by
`make peer-build` in setup), Tekton, kwok. The CRDs go on as `kubectl apply
--server-side` puts them, one field manager for both sides, so each apply replaces the
other's whole; Shipwright's `spec.conversion` names its webhook, which does not run
here, so it is set to None (bench.e2e.peer.shipwright_crds: every object is stored as
v1beta1 and served only so; `status.storedVersions` stays ["v1beta1"], so our CRDs,
which serve v1beta1 alone, are accepted). Our CEL rules apply to writes from then on;
objects already stored are not re-checked, and an unchanged completed status passes
the transition rules (ratcheting).

Each way, the outgoing controller leaves BuildRuns finished (succeeded, failed, a user
error, cancelled), running (pods held by kwok), and one cancelled while no controller
runs; one is created while none runs. The incoming one is started, the held pods
released, more BuildRuns created. Invariants: every BuildRun ends exactly once with
its pod's outcome; a finished BuildRun never changes (resourceVersion and status);
one TaskRun per BuildRun, and the TaskRun one controller started is the one the other
finishes (uid); no traceback in our log nor a panic in Shipwright's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.e2e import peer
from controller.buildrun import reasons
from controller.runtime.kube import JSON, Kube, Resource
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster.fates import FateWebhook
from devtools.cluster.localcluster import REPO
from devtools.cluster.stack import TektonStack
from tests.conftest import api_client_for
from tests.harness import (
    World,
    condition,
    controller_settings,
    release,
    running_controller,
    running_pod,
)

pytestmark = pytest.mark.cluster

NS = "switch"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CANCELED = {"state": "BuildRunCanceled"}


@contextlib.asynccontextmanager
async def shipwright_controller(stack: TektonStack, tmp_path: Path,
                                name: str) -> AsyncIterator[peer.ShipwrightController]:
    """Shipwright's controller over Shipwright's CRDs (applied first, as a rollback
    does), as admin, until the block ends (SIGTERM)."""
    await peer.apply_crds(stack.cluster, taskruns=False)
    ctl = peer.ShipwrightController(stack.cluster.kubeconfig, tmp_path / f"{name}.log",
                                    workers=4, workdir=tmp_path)
    await ctl.start()
    try:
        await ctl.wait_ready(120)
        yield ctl
    finally:
        await ctl.stop()


@contextlib.asynccontextmanager
async def ours(stack: TektonStack) -> AsyncIterator[Any]:
    """Our CRDs applied over Shipwright's, as the switch does; then our controller."""
    await stack.cluster.apply_crds([REPO / "manifests" / "crds"])
    async with running_controller(controller_settings(stack.cluster, NS)) as app:
        yield app


class Ledger:
    """What each BuildRun must end as, and what it was when first seen finished."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.want: dict[str, str] = {}
        self.frozen: dict[str, tuple[str, JSON]] = {}
        self.taskrun_uid: dict[str, str] = {}

    async def create(self, name: str, want: str, *, hold: bool = False,
                     fate: str = "succeed", **spec: Any) -> None:
        if hold:
            self.w.fate(name, fate="hold")
        elif fate != "succeed":
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
            done = await self.w.finished(name, timeout=60)
            self.frozen.setdefault(name, (done["metadata"]["resourceVersion"],
                                          done["status"]))

    async def check(self) -> None:
        taskruns = await self.w.taskruns()
        by_buildrun: dict[str, list[JSON]] = {}
        for tr in taskruns:
            by_buildrun.setdefault(tr["metadata"]["labels"][LABEL_BUILDRUN], []).append(tr)
        for name, want in self.want.items():
            br = await self.w.get(name)
            assert condition(br)["reason"] == want, (name, condition(br))
            rv, status = self.frozen[name]
            assert (br["metadata"]["resourceVersion"], br["status"]) == (rv, status), name
            mine = by_buildrun.get(name, [])
            if want == reasons.BUILD_NOT_FOUND:
                assert mine == [], name
                continue
            if want == reasons.BUILD_RUN_CANCELED and not br["status"].get("taskRunName"):
                assert mine == [], name  # cancelled before any controller started it
                continue
            assert len(mine) == 1, (name, [t["metadata"]["name"] for t in mine])
            assert br["status"]["taskRunName"] == mine[0]["metadata"]["name"], name
            if name in self.taskrun_uid:
                assert mine[0]["metadata"]["uid"] == self.taskrun_uid[name], name


async def one_way(ledger: Ledger, outgoing: Any, incoming: Any, tag: str) -> None:
    """BuildRuns under `outgoing` (entered and left here), then `incoming` takes over."""
    w = ledger.w
    finished = [f"{tag}-ok", f"{tag}-fail", f"{tag}-nobuild", f"{tag}-cancel"]
    running = [f"{tag}-held-ok", f"{tag}-held-fail", f"{tag}-cancel-between"]
    async with outgoing:
        await ledger.create(f"{tag}-ok", reasons.SUCCEEDED)
        await ledger.create(f"{tag}-fail", reasons.FAILED, fate="fail")
        await ledger.create(f"{tag}-nobuild", reasons.BUILD_NOT_FOUND, build={"name": "nope"})
        await ledger.create(f"{tag}-cancel", reasons.BUILD_RUN_CANCELED, hold=True)
        await ledger.create(f"{tag}-held-ok", reasons.SUCCEEDED, hold=True)
        await ledger.create(f"{tag}-held-fail", reasons.FAILED, hold=True)
        await ledger.create(f"{tag}-cancel-between", reasons.BUILD_RUN_CANCELED, hold=True)
        for name in [f"{tag}-cancel", *running]:
            await ledger.started(name)
        await w.kube.patch(BUILDRUNS, w.ns, f"{tag}-cancel", {"spec": CANCELED})
        await ledger.settle(finished)
    # No controller runs: a cancel and a creation wait for the next one.
    await w.kube.patch(BUILDRUNS, w.ns, f"{tag}-cancel-between", {"spec": CANCELED})
    await ledger.create(f"{tag}-between", reasons.SUCCEEDED)
    async with incoming:
        await release(w, f"{tag}-held-ok")
        await release(w, f"{tag}-held-fail", fate="fail")
        await ledger.create(f"{tag}-after", reasons.SUCCEEDED)
        await ledger.settle([*running, f"{tag}-between", f"{tag}-after"])
        await ledger.check()


async def test_shipwright_to_ours_and_back_mid_flight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    async with TektonStack(tmp_path / "stack") as stack, \
            FateWebhook(stack.cluster) as fates:
        kube = Kube(await api_client_for(stack.cluster.kubeconfig))
        try:
            await kube.create(NAMESPACES, None, {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            await peer.add_service_account(kube, NS)
            w = World(kube, NS, fates)
            ledger = Ledger(w)
            await peer.apply_crds(stack.cluster, taskruns=False)
            await w.strategy()
            await w.build()

            # Shipwright -> ours.
            await one_way(ledger, shipwright_controller(stack, tmp_path, "shipwright-1"),
                          ours(stack), "sw")
            # Ours -> Shipwright (the rollback): its CRDs go back on first.
            await one_way(ledger, ours(stack),
                          shipwright_controller(stack, tmp_path, "shipwright-2"), "us")
            await ledger.check()  # the first way's BuildRuns, after the second switch
        finally:
            await kube.close()
    tracebacks = [r.getMessage() for r in caplog.records
                  if r.exc_info or "Traceback" in r.getMessage()]
    assert tracebacks == [], tracebacks
    assert panics(tmp_path) == []


def panics(folder: Path) -> list[str]:
    """The tails of Shipwright's logs that show a Go panic."""
    texts = [log.read_text(errors="replace") for log in folder.glob("shipwright-*.log")]
    return [t[-3000:] for t in texts if "panic" in t or "goroutine " in t]

"""Shipwright's own CLI, `shp` (github.com/shipwright-io/cli, built by hack/shp/build), drives
this controller on the real Tekton stack (devtools.cluster.stack.TektonStack): it creates a Build
and BuildRuns our CRDs admit, lists them, cancels one, and `shp build run --follow`
follows one to its outcome.

`--follow` watches the build pod (by the build.shipwright.io/name and
buildrun.shipwright.io/name labels Tekton copies from our TaskRun) and tails its
container logs. kwok plays the kubelet and serves no logs, so shp says it could not
get them; the outcome it follows comes from the pod's phase and the BuildRun status.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from controller.buildrun import reasons
from controller.builds import reasons as build_reasons
from controller.shipwright.resources import BUILDRUNS, BUILDS
from devtools.cluster.stack import TektonStack
from devtools.hack import build
from tests.cluster.test_tekton import controller
from tests.harness import World, condition, metric, running_pod, wait_for

pytestmark = pytest.mark.cluster

IMAGE = "registry.example.com/shp:latest"


def shp_binary() -> Path:
    """The shp `make shp` built (hack/shp/build answers from its cache)."""
    return build("shp") / "shp"


async def shp(tekton: TektonStack, w: World, *args: str, timeout: float = 90) -> str:
    """Runs shp against the stack's API server in the test namespace; its stdout, or
    AssertionError with both streams when it exits non-zero."""
    proc = await asyncio.create_subprocess_exec(
        str(shp_binary()), *args, "--kubeconfig", str(tekton.cluster.kubeconfig),
        "--namespace", w.ns,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    text = out.decode()
    assert proc.returncode == 0, f"shp {' '.join(args)} exited {proc.returncode}:\n{text}" \
                                 f"\n{err.decode()}"
    return text


async def test_shp_creates_lists_cancels_and_follows(
    stack: TektonStack, world: World
) -> None:
    w = world
    w.fate("held", fate="hold")
    async with controller(stack, w):
        await shp(stack, w, "build", "create", "shp-app", "--strategy-kind", "BuildStrategy",
                  "--strategy-name", "kaniko", "--source-git-url",
                  "https://example.com/app.git", "--output-image", IMAGE)
        created = await w.kube.get(BUILDS, w.ns, "shp-app")
        assert created["spec"]["output"]["image"] == IMAGE
        assert created["spec"]["strategy"] == {"name": "kaniko", "kind": "BuildStrategy"}

        async def registered() -> bool:
            build_status = (await w.kube.get(BUILDS, w.ns, "shp-app")).get("status") or {}
            return build_status.get("reason") == build_reasons.SUCCEEDED
        await wait_for(registered, 30, what="the Build created by shp to register")
        listed = await shp(stack, w, "build", "list")
        assert "shp-app" in listed

        # A BuildRun whose pod stays Running until it is cancelled.
        await shp(stack, w, "buildrun", "create", "held", "--buildref-name", "shp-app")
        await running_pod(w, "held")
        listed = await shp(stack, w, "buildrun", "list")
        assert "held" in listed
        await shp(stack, w, "buildrun", "cancel", "held")
        done = await w.finished("held", 60)
        assert condition(done)["reason"] == reasons.BUILD_RUN_CANCELED

        # `shp build run --follow` creates a BuildRun (generateName shp-app-) and follows it.
        rampups = metric("build_buildrun_taskrun_rampup_duration_seconds_count")
        out = await shp(stack, w, "build", "run", "shp-app", "--follow", timeout=120)
        assert "has succeeded!" in out, out
        runs = [br for br in (await w.kube.list(BUILDRUNS, w.ns))["items"]
                if br["metadata"]["name"].startswith("shp-app-")]
        assert len(runs) == 1
        name = runs[0]["metadata"]["name"]
        # It followed this BuildRun's pod (named after its TaskRun, named after it).
        assert f'Pod "{name}-' in out and 'in "Running" state' in out, out
        finished = await w.finished(name, 60)
        assert condition(finished)["reason"] == reasons.SUCCEEDED
        # Shipwright's pod ramp-up, read from the finished TaskRun's real pod.
        await wait_for(lambda: metric("build_buildrun_taskrun_rampup_duration_seconds_count")
                       == rampups + 1, what="the TaskRun pod ramp-up to be observed")

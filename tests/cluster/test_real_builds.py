"""Real builds: BuildRuns whose pods run on the stack's real node (containerd and a real
kubelet, devtools.node.realnode), cloning from the stack's Git server and pushing to
its registry, each asserted from what a user sees.

Every Build here asks for the real node as a user would, with its own nodeSelector and
toleration (devtools.node.realnode.placement); every other test's pods stay on kwok's
node. The controller runs in-process with Shipwright's step images named through the
environment variables Shipwright reads (GIT_CONTAINER_IMAGE, ...), as built by
hack/node-images/build. Where this machine cannot hold a real node (no root, no
overlayfs, ...), every test here skips with one line saying what is missing.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from controller.buildrun import reasons
from controller.buildrun.annotations import INFRASTRUCTURE_ATTEMPTS, INFRASTRUCTURE_RETRIES
from controller.buildrun.resources.phases import run_name
from controller.runtime.kube import EVENTS, JSON, PODS, ApiError, Kube
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    TASKRUNS,
)
from devtools.cluster import fixtures
from devtools.cluster.fixtures import API
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.stack import TektonStack
from devtools.node import realbuilds
from devtools.node.realbuilds import BUILD_LINE, GREETING
from devtools.node.realnode import NODE, RealNode, placement
from tests.cluster.test_shp import shp
from tests.harness import (
    World,
    assert_start_copied,
    condition,
    controller_settings,
    gone,
    metric,
    running_controller,
    taskrun,
    tekton_verdict,
    wait_for,
)

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

# A real build on two busy cores: clone, buildah bud (pulls the base, runs a RUN), push.
BUILD_SECONDS = 300


@pytest.fixture
def node_env(real_node: RealNode, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Shipwright's step images as built here, in the environment the controller reads
    them from at start (controller.buildrun.config)."""
    for name, value in real_node.images.shipwright_env().items():
        monkeypatch.setenv(name, value)
    yield


@contextlib.asynccontextmanager
async def controller(stack: TektonStack, w: World) -> AsyncIterator[Any]:
    async with running_controller(controller_settings(stack.cluster, w.ns)) as app:
        yield app


@pytest.fixture(scope="module")
async def sample_strategies(kube: Kube) -> AsyncIterator[None]:
    """The buildah sample ClusterBuildStrategies, as written."""
    made = []
    for file in (realbuilds.BUILDAH_MANAGED_PUSH, realbuilds.BUILDAH_STRATEGY_PUSH):
        (build,) = realbuilds.shipwright_sample("build", file)
        strategy = realbuilds.sample_strategy(build)
        with contextlib.suppress(ApiError):
            await kube.create(CLUSTERBUILDSTRATEGIES, None, strategy)
            made.append(strategy["metadata"]["name"])
    yield
    for name in made:
        await kube.delete(CLUSTERBUILDSTRATEGIES, None, name)


async def pod_log(cluster: LocalCluster, namespace: str, pod: str, container: str) -> str:
    """What `kubectl logs POD --container=CONTAINER` prints: the API server asks the
    kubelet (pods/log)."""
    url = f"{cluster.url}/api/v1/namespaces/{namespace}/pods/{pod}/log?container={container}"
    async with aiohttp.ClientSession() as session, session.get(
        url, headers={"Authorization": f"Bearer {cluster.admin.token}"},
        ssl=cluster.ssl_context(),
    ) as resp:
        text = await resp.text()
        assert resp.status == 200, f"pods/log {pod}/{container}: {resp.status} {text[:300]}"
        return text


async def sample_build(w: World, node: RealNode, file: str, name: str) -> JSON:
    (build,) = realbuilds.shipwright_sample("build", file)
    body = realbuilds.on_real_node(node, build, w.ns, name=name)
    return await w.kube.create(BUILDS, w.ns, body)


async def build_sample(stack: TektonStack, w: World, node: RealNode, file: str,
                       name: str) -> JSON:
    """Shipwright's sample Build `file` as `name` (on_real_node), and its BuildRun
    `name`-1 run to Succeeded; the finished BuildRun."""
    await sample_build(w, node, file, name)
    async with controller(stack, w):
        await registered(w, name)
        await w.buildrun(f"{name}-1", name)
        done = await w.finished(f"{name}-1", BUILD_SECONDS)
    assert condition(done)["reason"] == reasons.SUCCEEDED, (condition(done), done["status"])
    return done


async def registered(w: World, build: str) -> None:
    async def ok() -> bool:
        got = await w.kube.get(BUILDS, w.ns, build)
        return (got.get("status") or {}).get("registered") == "True"
    await wait_for(ok, 30, 0.1, what=f"Build {build} to register")


async def the_pod(w: World, buildrun: str) -> JSON:
    name = (await taskrun(w, buildrun))["status"]["podName"]
    return await w.kube.get(PODS, w.ns, name)


# -- builds that succeed -----------------------------------------------------------------


async def test_buildah_sample_clones_builds_and_pushes_the_digest_it_reports(
    stack: TektonStack, real_node: RealNode, world_real: World, sample_strategies: None,
    node_env: None,
) -> None:
    """Shipwright's buildah sample with managed push (its image-processing step pushes):
    the Build as written but for the Git URL, the registry and the placement."""
    w, node = world_real, real_node
    commit = realbuilds.sample_repository(node)
    t = time.monotonic()
    done = await build_sample(stack, w, node, realbuilds.BUILDAH_MANAGED_PUSH, "buildah")
    elapsed = time.monotonic() - t
    pod = await the_pod(w, "buildah-1")
    assert pod["spec"]["nodeName"] == NODE
    pushed = node.registry.manifest_digest(f"{w.ns}/buildah")
    assert pushed is not None, "nothing was pushed to the registry"
    assert done["status"]["output"]["digest"] == pushed
    assert done["status"]["output"]["size"] > 0
    git = done["status"]["source"]["git"]
    assert git["commitSha"] == commit.sha
    assert git["commitAuthor"] == commit.author
    assert git["branchName"] == "main"
    assert done["status"]["source"]["timestamp"] == time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(commit.timestamp))
    # The build really ran the sample's Dockerfile: its RUN printed these.
    log = await pod_log(stack.cluster, w.ns, pod["metadata"]["name"], "step-build")
    assert BUILD_LINE in log and GREETING in log, log[-2000:]
    print(f"\nreal buildah build (managed push): {elapsed:.1f}s, digest {pushed}")


async def test_buildah_strategy_managed_push_reports_the_digest_buildah_pushed(
    stack: TektonStack, real_node: RealNode, world_real: World, sample_strategies: None,
    node_env: None,
) -> None:
    w, node = world_real, real_node
    done = await build_sample(stack, w, node, realbuilds.BUILDAH_STRATEGY_PUSH,
                              "pushes-itself")
    pushed = node.registry.manifest_digest(f"{w.ns}/pushes-itself")
    assert pushed is not None and done["status"]["output"]["digest"] == pushed


async def test_shp_follows_a_real_build_and_prints_its_log(
    stack: TektonStack, real_node: RealNode, world_real: World, sample_strategies: None,
    node_env: None,
) -> None:
    """`shp build run --follow` and `shp buildrun logs` print what the build printed."""
    w, node = world_real, real_node
    await sample_build(w, node, realbuilds.BUILDAH_MANAGED_PUSH, "followed")
    async with controller(stack, w):
        await registered(w, "followed")
        out = await shp(stack, w, "build", "run", "followed", "--follow",
                        timeout=BUILD_SECONDS)
        assert BUILD_LINE in out and GREETING in out, out[-3000:]
        assert "has succeeded!" in out, out[-3000:]
        (run,) = [b["metadata"]["name"] for b in (await w.kube.list(BUILDRUNS, w.ns))["items"]]
        logs = await shp(stack, w, "buildrun", "logs", run)
    assert BUILD_LINE in logs and GREETING in logs, logs[-3000:]
    assert node.registry.manifest_digest(f"{w.ns}/followed") is not None


async def test_shp_build_upload_builds_the_local_source(
    stack: TektonStack, real_node: RealNode, world_real: World, sample_strategies: None,
    node_env: None, tmp_path: Path,
) -> None:
    """`shp build upload` streams a local folder into the waiting pod (pods/exec through
    the kubelet), and the build runs on what it streamed."""
    w, node = world_real, real_node
    await sample_build(w, node, realbuilds.BUILDAH_MANAGED_PUSH, "uploaded")
    source = realbuilds.write_sample(node, tmp_path / "checkout")
    marker = f"uploaded from {source}"
    dockerfile = source / realbuilds.CONTEXT_DIR / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"RUN echo '{marker}'\n")
    async with controller(stack, w):
        await registered(w, "uploaded")
        out = await shp(stack, w, "build", "upload", "uploaded", str(source), "--follow",
                        timeout=BUILD_SECONDS)
    assert marker in out, out[-3000:]
    (run,) = (await w.kube.list(BUILDRUNS, w.ns))["items"]
    done = await w.finished(run["metadata"]["name"], 60)
    assert condition(done)["reason"] == reasons.SUCCEEDED, condition(done)
    assert done["status"]["output"]["digest"] == node.registry.manifest_digest(f"{w.ns}/uploaded")


# -- builds that fail as the tools fail ---------------------------------------------------


async def shell_strategy(w: World, node: RealNode, name: str, script: str,
                         **step: Any) -> None:
    """A BuildStrategy whose one step runs `script` in busybox (from the stack's registry)."""
    await w.kube.create(BUILDSTRATEGIES, w.ns, {
        "apiVersion": API, "kind": "BuildStrategy", "metadata": {"name": name},
        "spec": {"steps": [{"name": "build", "image": node.registry.base_image(),
                            "command": ["sh", "-c", script], **step}]}})


async def shell_build(w: World, node: RealNode, name: str, script: str, **step: Any) -> None:
    await shell_strategy(w, node, name, script, **step)
    realbuilds.sample_repository(node)
    await w.kube.create(BUILDS, w.ns, {
        "apiVersion": API, "kind": "Build", "metadata": {"name": name},
        "spec": {"strategy": {"name": name, "kind": "BuildStrategy"},
                 "source": {"type": "Git",
                            "git": {"url": node.git_url(realbuilds.SAMPLE_REPOSITORY)}},
                 "output": {"image": node.registry.image(f"{w.ns}/{name}"), "insecure": True},
                 **placement()}})


async def run_shell_build(stack: TektonStack, w: World, node: RealNode, name: str,
                          script: str, **step: Any) -> JSON:
    """shell_build `name`, and its BuildRun `name`-1 run to the end; the finished BuildRun."""
    await shell_build(w, node, name, script, **step)
    async with controller(stack, w):
        await w.buildrun(f"{name}-1", name)
        return await w.finished(f"{name}-1", BUILD_SECONDS)


async def test_a_step_that_exits_1_fails_naming_its_container_and_its_log(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    done = await run_shell_build(stack, w, real_node, "exits",
                                 "echo 'about to fail for real'; exit 1")
    cond = condition(done)
    assert (cond["status"], cond["reason"]) == ("False", reasons.FAILED), cond
    details = done["status"]["failureDetails"]
    pod = (await taskrun(w, "exits-1"))["status"]["podName"]
    assert details["location"] == {"pod": pod, "container": "step-build"}
    # The hint in the message names a log command that works.
    namespace, hinted_pod, container = logs_hint(cond["message"])
    assert (namespace, hinted_pod, container) == (w.ns, pod, "step-build"), cond["message"]
    assert "about to fail for real" in await pod_log(stack.cluster, namespace, hinted_pod,
                                                     container)


def logs_hint(message: str) -> tuple[str, str, str]:
    """(namespace, pod, container) of the `kubectl ... logs ...` command in `message`, in
    either spelling (-n/--namespace, -c/--container)."""
    words = message[message.index("kubectl"):].replace("=", " ").split()[1:]
    found: dict[str, str] = {}
    while words:
        word = words.pop(0)
        if word in ("-n", "--namespace"):
            found["namespace"] = words.pop(0)
        elif word in ("-c", "--container"):
            found["container"] = words.pop(0)
        elif word != "logs" and not word.startswith("-"):
            found.setdefault("pod", word)
    return found["namespace"], found["pod"], found["container"]


async def test_a_step_over_its_memory_limit_is_step_out_of_memory(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    # tail keeps a line until its end: 512 MiB without a newline, against 64 MiB.
    done = await run_shell_build(stack, w, real_node, "oom",
                                 "head -c 536870912 /dev/zero | tail",
                                 resources={"limits": {"memory": "64Mi"}})
    assert condition(done)["reason"] == reasons.STEP_OUT_OF_MEMORY, condition(done)
    assert done["status"]["failureDetails"]["location"]["container"] == "step-build"
    pod = await the_pod(w, "oom-1")
    (state,) = [s["state"]["terminated"] for s in pod["status"]["containerStatuses"]
                if s["name"] == "step-build"]
    assert state["reason"] == "OOMKilled", state


async def test_an_image_that_cannot_be_pulled_keeps_tektons_reason(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    missing = real_node.registry.image("nowhere/missing", "1.0")
    done = await run_shell_build(stack, w, real_node, "no-image", "true", image=missing)
    tekton = await tekton_verdict(w, "no-image-1")
    assert tekton["reason"] == "TaskRunImagePullFailed", tekton
    cond = condition(done)
    # What Shipwright v0.20.13 shows: Tekton's reason and message, as they are.
    assert (cond["status"], cond["reason"]) == ("False", "TaskRunImagePullFailed"), cond
    assert cond["message"] == tekton["message"]
    assert missing in cond["message"]


@contextlib.asynccontextmanager
async def running_build(stack: TektonStack, w: World, node: RealNode, name: str,
                        **run_spec: Any) -> AsyncIterator[str]:
    """A Build `name` whose step says "started" and sleeps 600 s, and its BuildRun
    `name`-1 (with `run_spec`) under the controller: the pod's name once the step runs."""
    await shell_build(w, node, name, "echo started; sleep 600")
    async with controller(stack, w):
        await w.buildrun(f"{name}-1", name, **run_spec)
        yield await running_step(w, stack.cluster, f"{name}-1")


async def test_cancelling_a_running_build_stops_its_pod(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    async with running_build(stack, w, real_node, "cancel") as pod:
        t = time.monotonic()
        await w.kube.patch(BUILDRUNS, w.ns, "cancel-1", {"spec": {"state": "BuildRunCanceled"}})
        done = await w.finished("cancel-1", 120)
        # Deleted only once the kubelet has stopped its containers.
        await gone(w, PODS, pod, 120)
        stopped = time.monotonic() - t
    assert condition(done)["reason"] == reasons.BUILD_RUN_CANCELED, condition(done)
    print(f"\ncancel: pod {pod} gone {stopped:.1f}s after the cancel")


async def test_a_running_build_that_times_out_is_build_run_timeout(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    async with running_build(stack, w, real_node, "slow", timeout="20s") as pod:
        done = await w.finished("slow-1", 120)
        await gone(w, PODS, pod, 120)
    assert condition(done)["reason"] == reasons.BUILD_RUN_TIMEOUT, condition(done)
    assert condition(done)["message"] == "BuildRun slow-1 failed to finish within 20s"


async def test_retention_ttl_deletes_a_real_finished_run(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    await shell_build(w, real_node, "kept", "echo done")
    await w.kube.patch(BUILDS, w.ns, "kept", {"spec": {"retention": {
        "ttlAfterSucceeded": "5s"}}})
    async with controller(stack, w):
        await w.buildrun("ttl-1", "kept")
        done = await w.finished("ttl-1", BUILD_SECONDS)
        assert condition(done)["reason"] == reasons.SUCCEEDED, condition(done)
        pod = (await taskrun(w, "ttl-1"))["status"]["podName"]
        t = time.monotonic()
        await gone(w, BUILDRUNS, "ttl-1", 60)
        deleted_after = time.monotonic() - t
        # Its TaskRun and pod go with it (kube-controller-manager's garbage collector).
        await gone(w, PODS, pod, 60)
    assert deleted_after < 30, deleted_after
    print(f"\nretention: BuildRun deleted {deleted_after:.1f}s after it was seen finished")


async def running_step(w: World, cluster: LocalCluster, buildrun: str) -> str:
    """The name of `buildrun`'s pod once its step `build` is running (and has said so)."""
    async def started() -> str | None:
        status = (await w.get(buildrun)).get("status") or {}
        assert not status.get("completionTime"), f"{buildrun} ended first: {status}"
        try:
            pod = await the_pod(w, buildrun)
        except (KeyError, ApiError):
            return None
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status["name"] == "step-build" and "running" in status["state"]:
                name: str = pod["metadata"]["name"]
                log = await pod_log(cluster, w.ns, name, "step-build")
                return name if "started" in log else None
        return None
    result: str = await wait_for(started, BUILD_SECONDS, 0.5,
                                 what=f"{buildrun}'s step to run")
    return result


@pytest.fixture
async def world_real(kube: Kube, namespace: str) -> World:
    """A namespace for real builds: no kwok fates, nothing but what each test makes."""
    return World(kube, namespace)


# -- infrastructure failures retried, user failures never (issue 43 part 3) ---------------


async def step_running(w: World, buildrun: str, step: str = "step-build") -> tuple[str, str]:
    """(TaskRun, pod) of `buildrun`'s first run once its `step` container runs."""
    async def running() -> tuple[str, str] | None:
        status = (await w.get(buildrun)).get("status") or {}
        assert not status.get("completionTime"), f"{buildrun} ended first: {status}"
        run = status.get("taskRunName")
        if not run:
            return None
        pod_name = ((await w.kube.get(TASKRUNS, w.ns, run)).get("status") or {}).get("podName")
        got = await w.kube.get_or_none(PODS, w.ns, pod_name) if pod_name else None
        for container in ((got or {}).get("status") or {}).get("containerStatuses") or []:
            if container["name"] == step and "running" in container["state"]:
                return str(run), str(pod_name)
        return None
    result: tuple[str, str] = await wait_for(running, BUILD_SECONDS, 0.5,
                                             what=f"{buildrun}'s {step} to run")
    return result


async def evict(w: World, pod: str) -> None:
    """What `kubectl drain` does to each pod: a policy/v1 Eviction (pods/eviction)."""
    await w.kube.request("POST", PODS.path(w.ns, pod, "eviction"), body={
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": w.ns}})


def tekton_condition(run: JSON) -> JSON:
    cond = succeeded_condition(run.get("status"))
    assert cond is not None, run.get("status")
    return cond


async def events_of(w: World, buildrun: str, reason: str) -> list[JSON]:
    items: list[JSON] = (await w.kube.list(EVENTS, w.ns))["items"]
    return [e for e in items if e["involvedObject"].get("name") == buildrun
            and e.get("reason") == reason]


async def test_an_evicted_build_runs_again_and_succeeds_with_the_second_attempts_image(
    stack: TektonStack, real_node: RealNode, world_real: World, sample_strategies: None,
    node_env: None,
) -> None:
    """The BuildRun's annotation asks for one retry; its pod is evicted through the
    eviction API while buildah builds (before anything is pushed). The BuildRun stays open,
    records the attempt, runs a second TaskRun, and ends Succeeded with the digest the
    registry holds, which only the second attempt pushed."""
    w, node = world_real, real_node
    await sample_build(w, node, realbuilds.BUILDAH_MANAGED_PUSH, "evicted")
    retries = metric("buildrun_infrastructure_retries_total", reason=reasons.POD_DISRUPTED)
    body = fixtures.buildrun("evicted-1", "evicted")
    body["metadata"]["annotations"] = {INFRASTRUCTURE_RETRIES: "1"}
    async with running_controller(controller_settings(
            stack.cluster, w.ns, infrastructure_retry_delay=2.0)):
        await registered(w, "evicted")
        await w.kube.create(BUILDRUNS, w.ns, body)
        first, pod = await step_running(w, "evicted-1")
        assert node.registry.manifest_digest(f"{w.ns}/evicted") is None
        t = time.monotonic()
        await evict(w, pod)
        done = await w.finished("evicted-1", BUILD_SECONDS)
        elapsed = time.monotonic() - t
        assert metric("buildrun_infrastructure_retries_total",
                      reason=reasons.POD_DISRUPTED) == retries + 1
        retried = await wait_for(lambda: events_of(w, "evicted-1",
                                                   reasons.INFRASTRUCTURE_RETRY), 60)
    assert condition(done)["reason"] == reasons.SUCCEEDED, (condition(done), done["status"])
    second = run_name(done, 2)
    assert done["status"]["taskRunName"] == second
    (attempt,) = json.loads(done["metadata"]["annotations"][INFRASTRUCTURE_ATTEMPTS])
    assert (attempt["taskRun"], attempt["reason"]) == (first, reasons.POD_DISRUPTED), attempt
    assert "EvictionByEvictionAPI" in attempt["message"], attempt
    assert first in retried[0]["message"] and second in retried[0]["message"]
    # The first run failed as Tekton saw it; the second is Shipwright's TaskRun all the same.
    runs = {t["metadata"]["name"]: t for t in await w.taskruns()}
    assert set(runs) == {first, second}
    assert tekton_condition(runs[first])["status"] == "False", runs[first]["status"]
    assert runs[second]["metadata"]["labels"][LABEL_BUILDRUN] == "evicted-1"
    pushed = node.registry.manifest_digest(f"{w.ns}/evicted")
    assert pushed is not None and done["status"]["output"]["digest"] == pushed
    # Its start and completion are the second run's.
    assert_start_copied(done, runs[second])
    assert done["status"]["completionTime"] == runs[second]["status"]["completionTime"]
    print(f"\neviction: {first} evicted (Tekton: {tekton_condition(runs[first])['reason']}; "
          f"ours: {attempt['reason']}), {second} succeeded "
          f"{elapsed:.1f}s after the eviction")


async def test_a_build_that_exits_1_is_never_retried(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    """Retries asked for on the Build and by the flag: a step's own failure is the
    outcome, at once, one TaskRun."""
    w, node = world_real, real_node
    await shell_build(w, node, "fails", "echo 'failing on purpose'; exit 1")
    await w.kube.patch(BUILDS, w.ns, "fails", {"metadata": {"annotations": {
        INFRASTRUCTURE_RETRIES: "3"}}})
    async with running_controller(controller_settings(
            stack.cluster, w.ns, infrastructure_retries=3, infrastructure_retry_delay=1.0)):
        await w.buildrun("fails-1", "fails")
        done = await w.finished("fails-1", BUILD_SECONDS)
    assert condition(done)["reason"] == reasons.FAILED, condition(done)
    assert INFRASTRUCTURE_ATTEMPTS not in (done["metadata"].get("annotations") or {})
    assert len(await w.taskruns()) == 1


async def test_a_build_whose_pod_is_deleted_under_it_runs_again(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    """`kubectl delete pod --grace-period=2` of a running build (no DisruptionTarget, no
    Evicted: only the deletion asked before the run failed tells it), retries asked for by
    the flag: the second attempt runs to its end."""
    w, node = world_real, real_node
    await shell_build(w, node, "deleted", "echo started; sleep 20; echo done")
    async with running_controller(controller_settings(
            stack.cluster, w.ns, infrastructure_retries=2, infrastructure_retry_delay=1.0)):
        await w.buildrun("deleted-1", "deleted")
        pod = await running_step(w, stack.cluster, "deleted-1")
        first = (await w.get("deleted-1"))["status"]["taskRunName"]
        await w.kube.request("DELETE", PODS.path(w.ns, pod), body={
            "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 2})
        done = await w.finished("deleted-1", BUILD_SECONDS)
    runs = {t["metadata"]["name"]: t for t in await w.taskruns()}
    (attempt,) = json.loads(done["metadata"]["annotations"][INFRASTRUCTURE_ATTEMPTS])
    print(f"\npod deleted: {first} failed (Tekton: "
          f"{tekton_condition(runs[first])['reason']}; ours: {attempt['reason']})")
    assert condition(done)["reason"] == reasons.SUCCEEDED, (condition(done), done["status"])
    assert (attempt["taskRun"], attempt["reason"]) == (first, reasons.POD_DELETED), attempt
    assert set(runs) == {first, run_name(done, 2)}
    assert done["status"]["taskRunName"] == run_name(done, 2)

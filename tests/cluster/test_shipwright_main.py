"""What Shipwright's main has that v0.20.13 has not (issue 43), on the real API server and
Tekton: each off by default, v0.20.13's behaviour kept, and main's behind its setting.

- FORBIDDEN_ENV_VAR_NAMES (#2275): main's env blocklist, in main's reasons and words, on a
  Build, a BuildRun's own env (before its Build is read, as main's BuildRunFields), an
  embedded spec, and a strategy step.
- --fail-on-owner-conflict (#2252): a BuildRun another object controls, of a Build with
  retention.atBuildDeletion, fails with SetOwnerReferenceFailed instead of running.
- #2187's outcome series, read from a scrape of /metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.app import App
from controller.buildrun import reasons
from controller.builds import reasons as build_reasons
from controller.runtime.kube import JSON, Resource
from controller.shipwright.forbidden_env import (
    ENV_FORBIDDEN_ENV_VAR_NAMES,
    SHIPWRIGHT_MAIN_DEFAULT,
)
from controller.shipwright.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from tests.harness import (
    World,
    condition,
    controller_settings,
    release,
    running_controller,
    running_pod,
    scrape,
    taskrun,
    wait_for,
)

pytestmark = pytest.mark.cluster

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")


@asynccontextmanager
async def controller(cluster: LocalCluster, w: World, **overrides: object) -> AsyncIterator[App]:
    async with running_controller(controller_settings(cluster, w.ns, **overrides)) as app:
        yield app


async def build_status(w: World, name: str) -> JSON:
    async def validated() -> JSON | None:
        status: JSON = (await w.kube.get(BUILDS, w.ns, name)).get("status") or {}
        return status if status.get("registered") else None
    found: JSON = await wait_for(validated, 20, what=f"Build {name} validated")
    return found


async def poisoned_strategy(w: World, name: str, var: str) -> None:
    """The default strategy with `var` in its step's own env."""
    body = fixtures.strategy(name)
    body["spec"]["steps"][0]["env"] = [{"name": var, "value": "/tmp/x"}]
    await w.kube.create(BUILDSTRATEGIES, w.ns, body)


def step_env(run: JSON) -> set[str]:
    return {v["name"] for s in run["spec"]["taskSpec"]["steps"] for v in s.get("env") or []}


async def test_forbidden_env_names_are_main_s_with_the_setting(
    cluster: LocalCluster, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_FORBIDDEN_ENV_VAR_NAMES, ", ".join(SHIPWRIGHT_MAIN_DEFAULT))
    await world.build("injected", env=[{"name": "LD_PRELOAD", "value": "/tmp/evil.so"}])
    await poisoned_strategy(world, "poisoned", "PYTHONSTARTUP")
    await world.build("poisoned-build", strategy="poisoned")
    async with controller(cluster, world):
        # A Build: main's reason and words on its status.
        status = await build_status(world, "injected")
        assert status == {"registered": "False",
                          "reason": build_reasons.SPEC_ENV_NAME_FORBIDDEN,
                          "message": 'environment variable "LD_PRELOAD" is forbidden for '
                                     "security reasons"}
        # A BuildRun's own env, refused before its Build is read (main's BuildRunFields):
        # a missing Build is not what it reports.
        await world.buildrun("own-env", env=[{"name": "BASH_ENV", "value": "/tmp/evil.sh"}])
        await world.buildrun("no-build", build_ref="does-not-exist",
                             env=[{"name": "NODE_OPTIONS", "value": "--require /x"}])
        # An embedded spec: the transient Build's check, as BuildRegistrationFailed.
        embedded = fixtures.build_spec()
        embedded["env"] = [{"name": "LD_AUDIT", "value": "x"}]
        await world.buildrun("embedded", build_ref=None, build={"spec": embedded})
        # A strategy step's own env: the generator refuses it.
        await world.buildrun("poisoned-run", build_ref="poisoned-build")
        await world.buildrun("fine", env=[{"name": "MY_VAR", "value": "1"}])
        for name, reason, message in [
            ("own-env", reasons.SPEC_ENV_NAME_FORBIDDEN,
             'environment variable "BASH_ENV" is forbidden for security reasons'),
            ("no-build", reasons.SPEC_ENV_NAME_FORBIDDEN,
             'environment variable "NODE_OPTIONS" is forbidden for security reasons'),
            ("embedded", reasons.BUILD_REGISTRATION_FAILED,
             'environment variable "LD_AUDIT" is forbidden for security reasons'),
            ("poisoned-run", reasons.TASK_RUN_GENERATION_FAILED,
             'BuildStrategy step "build" defines forbidden environment variable '
             '"PYTHONSTARTUP"'),
        ]:
            cond = condition(await world.finished(name))
            assert (cond["status"], cond["reason"], cond["message"]) == (
                "False", reason, message), name
        assert "MY_VAR" in step_env(await taskrun(world, "fine"))
        made = {t["metadata"]["labels"]["buildrun.shipwright.io/name"]
                for t in await world.taskruns()}
        assert made == {"fine"}


async def test_without_the_setting_no_env_name_is_forbidden_as_in_v0_20_13(
    cluster: LocalCluster, world: World
) -> None:
    await world.build("injected", env=[{"name": "LD_PRELOAD", "value": "/tmp/evil.so"}])
    await poisoned_strategy(world, "poisoned", "PYTHONSTARTUP")
    await world.build("poisoned-build", strategy="poisoned")
    async with controller(cluster, world):
        assert (await build_status(world, "injected"))["registered"] == "True"
        await world.buildrun("own-env", env=[{"name": "BASH_ENV", "value": "/tmp/evil.sh"}])
        await world.buildrun("poisoned-run", build_ref="poisoned-build")
        assert "BASH_ENV" in step_env(await taskrun(world, "own-env"))
        assert "PYTHONSTARTUP" in step_env(await taskrun(world, "poisoned-run"))


async def foreign_controller(w: World) -> JSON:
    """An ownerReference making a real ConfigMap the controller of what carries it (a real
    object: the garbage collector deletes what a missing owner owns)."""
    cm = await w.kube.create(CONFIGMAPS, w.ns, {"apiVersion": "v1", "kind": "ConfigMap",
                                                "metadata": {"name": "cm"}})
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm",
            "uid": cm["metadata"]["uid"], "controller": True}


async def controlled_buildrun(w: World, name: str, owner: JSON) -> None:
    body = fixtures.buildrun(name, "owned")
    body["metadata"]["ownerReferences"] = [owner]
    await w.kube.create(BUILDRUNS, w.ns, body)


async def test_an_owner_conflict_fails_the_buildrun_with_the_flag(
    cluster: LocalCluster, world: World
) -> None:
    owner = await foreign_controller(world)
    await world.build("owned", retention={"atBuildDeletion": True})
    async with controller(cluster, world, fail_on_owner_conflict=True):
        await controlled_buildrun(world, "controlled", owner)
        await world.buildrun("plain", build_ref="owned")
        cond = condition(await world.finished("controlled"))
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "False", reasons.SET_OWNER_REFERENCE_FAILED,
            "unexpected error when trying to set the ownerreference: Object "
            f"{world.ns}/controlled is already owned by another ConfigMap controller cm")
        # A BuildRun no other object controls runs, owned by its Build.
        await taskrun(world, "plain")
        plain = await world.get("plain")
        assert [r["kind"] for r in plain["metadata"]["ownerReferences"]] == ["Build"]
        made = {t["metadata"]["labels"]["buildrun.shipwright.io/name"]
                for t in await world.taskruns()}
        assert made == {"plain"}
    # The Build's status is left alone (v0.20.13 wrote SetOwnerReferenceFailed there).
    assert (await build_status(world, "owned"))["reason"] == build_reasons.SUCCEEDED


async def test_an_owner_conflict_runs_by_default_as_in_v0_20_13(
    cluster: LocalCluster, world: World
) -> None:
    owner = await foreign_controller(world)
    await world.build("owned", retention={"atBuildDeletion": True})
    async with controller(cluster, world):
        await controlled_buildrun(world, "controlled", owner)
        await taskrun(world, "controlled")
        cond = condition(await world.finished("controlled", 60))
        assert cond["reason"] == reasons.SUCCEEDED, cond
        refs = (await world.get("controlled"))["metadata"]["ownerReferences"]
        # The Build owns it beside the ConfigMap (no controller reference: none conflicts).
        assert sorted((r["kind"], bool(r.get("controller"))) for r in refs) == [
            ("Build", False), ("ConfigMap", True)]


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Each sample of metric `name` in a scrape, by its sorted labels."""
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text, name).get(tuple(sorted(labels.items())), 0.0)


async def test_2187s_outcome_series_in_a_scrape(cluster: LocalCluster, world: World) -> None:
    """build_buildruns_active counts a held run and lets it go when it ends; every finish
    counts a result, and each failure its reason, beside v0.20.13's series."""
    world.fate("held", fate="hold")
    async with controller(cluster, world) as app:
        before = await scrape(app)
        await world.buildrun("held")
        await running_pod(world, "held")
        held = await scrape(app)
        assert value(held, "build_buildruns_active") == 1.0
        await release(world, "held")
        assert condition(await world.finished("held", 60))["reason"] == reasons.SUCCEEDED
        await world.buildrun("missing", build_ref="does-not-exist")
        await world.buildrun("canceled", state="BuildRunCanceled")
        await world.finished("missing")
        await world.finished("canceled")
        after = await scrape(app)
    assert value(after, "build_buildruns_active") == 0.0
    assert value(after, "build_buildrun_result_total") - value(
        before, "build_buildrun_result_total") == 3.0
    for reason, count in [("BuildNotFound", 1.0), ("BuildRunCanceled", 1.0),
                          ("Succeeded", 0.0)]:
        name = "build_buildrun_failure_reason_total"
        assert value(after, name, reason=reason) - value(before, name, reason=reason) == \
            count, reason
    # v0.20.13's own, unchanged beside them.
    assert value(after, "build_buildruns_completed_total") - value(
        before, "build_buildruns_completed_total") == 1.0

"""Least privilege, for real: the controller runs with nothing but manifests/rbac/.

The RBAC manifests are applied to the real API server (RBAC on), a token for the
controller's ServiceAccount is minted with the TokenRequest API, and the
controller runs with a kubeconfig holding only that token: through the happy
path, a failed TaskRun and user errors. Then each of three roles with one verb
missing shows that a missing permission surfaces as a clear error, never as a
silent stall: a BuildRun that cannot create its TaskRun ends
ReconcilerRetriesExhausted saying "forbidden" (error_class="forbidden" in the
metrics and the logs), and a controller that cannot watch what it caches never
reports ready and says why (its lists are watch-lists: `watch` is the verb every list
needs, where `list` is needed only by a server without watch-lists).

tests/cluster/test_manifests.py checks the same manifests from the deployment side
(kustomize, SubjectAccessReviews, the Deployment's exact flags as a subprocess);
this file runs the controller in-process, so it can read its logs and metrics.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from controller.app import App
from controller.buildrun import reasons
from controller.runtime.kube import EVENTS, LEASES, Kube
from controller.settings import LeaderElectionSettings, RetryBudget, Settings
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster.localcluster import LocalCluster, write_token_kubeconfig
from devtools.fakes.fates import results
from tests.harness import (
    World,
    condition,
    controller_settings,
    metric,
    release,
    running_controller,
    running_pod,
    scrape,
    wait_for,
)
from tests.shipped import listed

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
NAMESPACE_MANIFEST = REPO / "manifests" / "namespace.yaml"

Obj = dict[str, Any]


def rbac_objects() -> list[Obj]:
    """The RBAC a default install applies (not the opt-in pod_logs.yaml)."""
    return listed("rbac")


def one(kind: str) -> Obj:
    [obj] = [o for o in rbac_objects() if o["kind"] == kind]
    return obj


def strings(value: Any) -> list[str]:
    """Every string anywhere inside `value`."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def retries(error_class: str) -> float:
    return metric("buildrun_retries_total", error_class=error_class)


async def mint_token(cluster: LocalCluster, namespace: str, sa: str) -> str:
    """A token for `sa`, from the TokenRequest API (what the kubelet mounts into the pod)."""
    review = await cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )
    token: str = review["status"]["token"]
    return token


async def sa_kubeconfig(cluster: LocalCluster, namespace: str, sa: str, path: Path) -> Path:
    user = f"system:serviceaccount:{namespace}:{sa}"
    return write_token_kubeconfig(path, cluster.url, cluster.ca_file, user,
                                  await mint_token(cluster, namespace, sa))


async def whoami(kubeconfig: Path) -> str:
    """Who the API server says the kubeconfig's credentials are (SelfSubjectReview)."""
    from controller.runtime.kube import load_api_client

    kube = Kube(await load_api_client(str(kubeconfig)))
    try:
        review = await kube.request(
            "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    finally:
        await kube.close()
    name: str = review["status"]["userInfo"]["username"]
    return name


async def deploy_rbac(cluster: LocalCluster) -> Obj:
    """manifests/namespace.yaml and manifests/rbac/*.yaml, applied as they are."""
    await cluster.apply(yaml.safe_load(NAMESPACE_MANIFEST.read_text()))
    for obj in rbac_objects():
        await cluster.apply(obj)
    return one("ServiceAccount")


async def limited_role(cluster: LocalCluster, namespace: str, drop: tuple[str, str, str]) -> str:
    """The manifests' ClusterRole minus one verb (group, resource, verb), bound to a new
    ServiceAccount in `namespace`; returns the ServiceAccount's name."""
    group, resource, verb = drop
    role = copy.deepcopy(one("ClusterRole"))
    slug = resource.replace("/", "-")
    name = f"buildrun-controller-without-{verb}-{slug}-{uuid.uuid4().hex[:6]}"
    role["metadata"] = {"name": name}
    found = False
    for rule in role["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            assert rule["resources"] == [resource], "split the rule first"
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            found = True
    assert found, f"the ClusterRole does not grant {verb} on {resource}"
    role["rules"] = [r for r in role["rules"] if r["verbs"]]
    await cluster.apply(role)
    await cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": name, "namespace": namespace}})
    await cluster.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    })
    return name


async def limited_settings(
    cluster: LocalCluster, namespace: str, drop: tuple[str, str, str], path: Path,
    **overrides: Any,
) -> tuple[str, Settings]:
    """Controller settings that authenticate as a new ServiceAccount bound to
    `limited_role(drop)`; returns the ServiceAccount's name too."""
    sa = await limited_role(cluster, namespace, drop)
    kubeconfig = await sa_kubeconfig(cluster, namespace, sa, path)
    return sa, controller_settings(cluster, namespace, kubeconfig=str(kubeconfig), **overrides)


# -- the manifests, read ------------------------------------------------------------------


def test_the_roles_grant_no_wildcard_and_never_write_secrets() -> None:
    roles = [o for o in rbac_objects() if o["kind"] in ("ClusterRole", "Role")]
    assert {r["kind"] for r in roles} == {"ClusterRole", "Role"}
    for role in roles:
        assert not [s for s in strings(role) if "*" in s], role["metadata"]["name"]
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, rule
            assert "configmaps" not in {r.split("/")[0] for r in rule["resources"]}
            # Secrets read only: get (a Build's Secrets must exist), list and watch (the
            # Build controller's metadata-only Secret informer); never written.
            assert "secrets" not in rule["resources"] or rule["verbs"] == [
                "get", "list", "watch"], rule
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
    assert not [b for b in rbac_objects()
                if b["kind"].endswith("Binding") and b["roleRef"]["name"] == "cluster-admin"]


# -- the controller, run as its ServiceAccount ------------------------------------------------


async def test_controller_runs_the_happy_path_and_user_errors_as_its_service_account(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sa = await deploy_rbac(cluster)
    sa_ns, sa_name = sa["metadata"]["namespace"], sa["metadata"]["name"]
    kubeconfig = await sa_kubeconfig(cluster, sa_ns, sa_name, tmp_path / "sa.kubeconfig")
    assert await whoami(kubeconfig) == f"system:serviceaccount:{sa_ns}:{sa_name}"
    # The lease the Role allows (by name, in the controller's own namespace).
    [lease_name] = one("Role")["rules"][1]["resourceNames"]
    identity = f"rbac-test-{uuid.uuid4().hex[:8]}"
    settings = controller_settings(
        cluster, world.ns, kubeconfig=str(kubeconfig),
        leader_election=LeaderElectionSettings(
            namespace=sa_ns, name=lease_name, identity=identity,
            lease_duration=4.0, renew_deadline=3.0, retry_period=0.5),
    )
    forbidden_before = retries("forbidden")
    # Tekton's own controller, under Tekton's RBAC, runs the TaskRuns; kwok the pods.
    world.fate("ok", fate="hold", results=results(**{"shp-image-digest": "sha256:" + "ab" * 32}))
    world.fate("fails", fate="fail")
    caplog.set_level(logging.WARNING)
    async with running_controller(settings, identity) as app:
        await wait_for(lambda: app.controller("buildrun").running, timeout=30, what="the lease")
        held = await kube.get(LEASES, sa_ns, lease_name)
        assert held["spec"]["holderIdentity"] == identity

        await world.buildrun("ok")
        await world.taskrun_of("ok", timeout=30)

        async def running() -> bool:
            return condition(await world.get("ok")).get("reason") == reasons.RUNNING
        await wait_for(running, timeout=30, what="Running")
        await release(world, "ok")

        await world.buildrun("fails")  # a failed TaskRun: its Pod is looked up
        await world.buildrun("no-build", build_ref="nope")
        await world.buildrun("no-sa", serviceAccount="nobody")

        done = {n: await world.finished(n, timeout=30)
                for n in ("ok", "fails", "no-build", "no-sa")}
        text = await scrape(app)

    assert condition(done["ok"])["reason"] == reasons.SUCCEEDED
    assert done["ok"]["status"]["output"]["digest"].startswith("sha256:")
    assert condition(done["fails"])["reason"] == reasons.FAILED
    assert condition(done["no-build"])["reason"] == reasons.BUILD_NOT_FOUND
    assert condition(done["no-sa"])["reason"] == reasons.SERVICE_ACCOUNT_NOT_FOUND
    assert len(await world.taskruns()) == 2
    events = (await kube.list(EVENTS, world.ns))["items"]
    assert {e["involvedObject"]["name"] for e in events} >= set(done)
    assert retries("forbidden") == forbidden_before
    assert 'buildrun_retries_total{error_class="forbidden"} 0.0' in text
    refused = [r.getMessage() for r in caplog.records if "forbidden" in str(r.__dict__).lower()]
    assert refused == [], refused
    # A clean stop released the lease (update, by name).
    assert not (await kube.get(LEASES, sa_ns, lease_name))["spec"].get("holderIdentity")


async def test_the_pipelinerun_executor_runs_as_its_service_account(
    cluster: LocalCluster, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """BUILDRUN_EXECUTOR=PipelineRun with nothing but manifests/rbac/: a PipelineRun
    created, watched and cancelled (pipelineruns), its TaskRuns' results and a failed one's
    pod read, and a multi-arch BuildRun's Nodes listed (nodes list): nothing refused."""
    sa = await deploy_rbac(cluster)
    kubeconfig = await sa_kubeconfig(cluster, sa["metadata"]["namespace"],
                                     sa["metadata"]["name"], tmp_path / "sa.kubeconfig")
    monkeypatch.setenv("BUILDRUN_EXECUTOR", "PipelineRun")
    forbidden_before = retries("forbidden")
    world.fate("ok", results=results(**{"shp-image-digest": "sha256:" + "ab" * 32}))
    world.fate("fails", fate="fail")
    world.fate("stop", fate="hold")
    caplog.set_level(logging.WARNING)
    platforms = {"image": "registry.example.com/app:latest",
                 "platforms": [{"os": "linux", "arch": "amd64"}]}
    async with running_controller(controller_settings(cluster, world.ns,
                                                      kubeconfig=str(kubeconfig))):
        await world.buildrun("ok", output=platforms)
        await world.buildrun("fails")
        await world.buildrun("stop")
        await running_pod(world, "stop")
        await world.kube.patch(BUILDRUNS, world.ns, "stop",
                               {"spec": {"state": "BuildRunCanceled"}})
        done = {n: await world.finished(n, timeout=90) for n in ("ok", "fails", "stop")}
    assert condition(done["ok"])["reason"] == reasons.SUCCEEDED, done["ok"]["status"]
    assert done["ok"]["status"]["output"]["digest"].startswith("sha256:")
    assert condition(done["fails"])["reason"] == reasons.PIPELINE_RUN_FAILED
    assert done["fails"]["status"]["failureDetails"]["location"]["pod"]
    assert condition(done["stop"])["reason"] == reasons.BUILD_RUN_CANCELED
    assert {d["status"]["executor"]["kind"] for d in done.values()} == {"PipelineRun"}
    assert retries("forbidden") == forbidden_before
    refused = [r.getMessage() for r in caplog.records if "forbidden" in str(r.__dict__).lower()]
    assert refused == [], refused


async def test_without_create_on_taskruns_the_buildrun_fails_saying_forbidden(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sa, settings = await limited_settings(cluster, world.ns,
                                          ("tekton.dev", "taskruns", "create"), tmp_path / "kc",
                                          budget=RetryBudget(max_retries=2, max_age=0))
    forbidden_before = retries("forbidden")
    caplog.set_level(logging.WARNING, logger="controller")
    async with running_controller(settings) as app:
        await world.buildrun("denied")
        done = await world.finished("denied", timeout=30)
        text = await scrape(app)
    cond = condition(done)
    assert cond["reason"] == reasons.RECONCILER_RETRIES_EXHAUSTED, cond
    assert "forbidden" in cond["message"], cond["message"]
    assert f"system:serviceaccount:{world.ns}:{sa}" in cond["message"]
    assert 'cannot create resource "taskruns"' in cond["message"]
    assert retries("forbidden") - forbidden_before == 2  # two retries, then the budget is spent
    assert 'buildrun_retries_total{error_class="forbidden"}' in text
    logged = [r for r in caplog.records
              if r.getMessage() == "reconciled" and "forbidden" in str(getattr(r, "error", ""))]
    assert len(logged) == 3, [r.__dict__ for r in caplog.records][-5:]  # every try, logged
    assert await world.taskruns() == []


async def test_without_create_on_events_buildruns_still_finish_and_the_loss_is_counted(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
) -> None:
    _, settings = await limited_settings(cluster, world.ns, ("", "events", "create"),
                                         tmp_path / "kc")
    refused_before = metric("controller_events_dropped_total", cause="refused")
    async with running_controller(settings):
        await world.buildrun("quiet", build_ref="missing")
        done = await world.finished("quiet", timeout=30)
        await wait_for(
            lambda: metric("controller_events_dropped_total", cause="refused") > refused_before,
            what="the refused Event counted")
    assert condition(done)["reason"] == reasons.BUILD_NOT_FOUND
    assert (await kube.list(EVENTS, world.ns))["items"] == []


async def test_without_update_on_buildrun_status_the_failure_is_loud_and_backs_off(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing can record the outcome then; the next best thing is saying so, slowly."""
    _, settings = await limited_settings(
        cluster, world.ns, ("shipwright.io", "buildruns/status", "update"), tmp_path / "kc",
        budget=RetryBudget(max_retries=3, max_age=0))
    forbidden_before = retries("forbidden")
    caplog.set_level(logging.WARNING, logger="controller")
    async with running_controller(settings):
        await world.buildrun("mute", build_ref="nope")  # a user error: one status write
        await wait_for(lambda: retries("forbidden") - forbidden_before >= 3, timeout=30,
                       what="forbidden retries")
        await asyncio.sleep(3.0)
        attempts = retries("forbidden") - forbidden_before
    # Backoff (0.05 s doubling, at most 2 s) keeps a refused write from spinning.
    assert attempts <= 10, attempts
    assert "completionTime" not in ((await world.get("mute")).get("status") or {})
    logged = [str(getattr(r, "error", "")) for r in caplog.records
              if r.getMessage() == "reconciled"]
    assert logged and all("forbidden" in e for e in logged), logged
    assert any('cannot update resource "buildruns/status"' in e for e in logged), logged


async def test_without_watch_on_builds_the_controller_never_reports_ready_and_says_why(
    cluster: LocalCluster, world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    _, settings = await limited_settings(cluster, world.ns, ("shipwright.io", "builds", "watch"),
                                         tmp_path / "kc")
    caplog.set_level(logging.WARNING, logger="controller")
    app = await App.create(settings, "no-watch")
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await world.buildrun("waits")
        await wait_for(lambda: bool(app.endpoints.addresses), what="endpoints")
        await asyncio.sleep(3.0)
        probes = app.endpoints.addresses["probes"]
        async with aiohttp.ClientSession() as session, session.get(
            f"http://{probes}/readyz"
        ) as resp:
            assert resp.status == 503, await resp.text()
        assert not app.controller("buildrun").running, \
            "it reconciles with a cache it could not fill"
        assert not task.done()
        said = [str(getattr(r, "error", "")) for r in caplog.records
                if r.getMessage() == "watch failed, reconnecting"
                and getattr(r, "resource", "") == "builds"]
        assert said and 'cannot watch resource "builds"' in said[0], said
    finally:
        app.request_stop()
        assert await asyncio.wait_for(task, 30) == 0
    # Nothing was done behind the user's back: the BuildRun is untouched, no TaskRun.
    assert not (await world.get("waits")).get("status")
    assert (await world.kube.list(TASKRUNS, world.ns))["items"] == []

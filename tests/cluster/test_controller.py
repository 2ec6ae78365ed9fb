"""The controller machinery on the real API server: informers across restarts and
410s, leader hand-over, graceful shutdown, metrics over HTTP, and the CLI."""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller.app import App
from controller.buildrun import reasons
from controller.runtime.controller import Result
from controller.runtime.informers import Informer
from controller.runtime.kube import JSON, LEASES, ApiError, Kube, key_of
from controller.settings import LeaderElectionSettings
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster.fixtures import NAMESPACES
from devtools.cluster.localcluster import LocalCluster
from tests.conftest import api_client_for
from tests.harness import (
    Interval,
    World,
    condition,
    controller_settings,
    metric,
    record_reconciles,
    running_controller,
    scrape,
    wait_for,
)

pytestmark = pytest.mark.cluster


async def server_state(kube: Kube, namespace: str) -> dict[str, str]:
    items = (await kube.list(BUILDRUNS, namespace))["items"]
    return {f"{namespace}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items}


def cache_state(informer: Informer) -> dict[str, str]:
    return {key_of(o): o["metadata"]["resourceVersion"] for o in informer.store.values()}


async def test_watch_resumes_after_api_server_restart(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    w, namespace = world, world.ns
    async with running_controller(controller_settings(cluster, namespace)) as app:
        await w.buildrun("before")
        await w.taskrun_of("before")
        await cluster.restart_apiserver()
        await w.buildrun("after")
        await kube.patch(BUILDRUNS, namespace, "before", {"metadata": {"labels": {"x": "y"}}})
        await w.taskrun_of("after", timeout=60)
        await wait_for(lambda: _same(app.informers.get(BUILDRUNS), kube, namespace), timeout=60,
                       what="cache to equal the server")
    assert metric("informer_watch_restarts_total", resource="buildruns", cause="error") >= 1


async def _same(informer: Informer, kube: Kube, namespace: str) -> bool:
    try:
        return cache_state(informer) == await server_state(kube, namespace)
    except ApiError as exc:
        if exc.status == 429:  # a restarted API server's storage still initializing
            return False
        raise


async def test_relist_after_410_gone_delivers_missed_deletes(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    w = World(kube, namespace)
    for name in ("keep", "drop"):
        await w.buildrun(name)
    informer = Informer(kube, BUILDRUNS, namespace)
    deleted: list[str] = []
    informer.add_handler(lambda t, o, _, __: deleted.append(key_of(o)) if t == "DELETED" else None)
    task = asyncio.create_task(informer.run())
    await informer.wait_synced()
    task.cancel()  # a long disconnection: we keep our (soon too old) resourceVersion
    await asyncio.gather(task, return_exceptions=True)

    await kube.delete(BUILDRUNS, namespace, "drop")
    await w.buildrun("new")
    await cluster.compact_etcd()
    await cluster.restart_apiserver()  # a fresh watch cache knows nothing older
    relists = metric("informer_relists_total", resource="buildruns")
    task = asyncio.create_task(informer.run())
    try:
        await wait_for(lambda: _same(informer, kube, namespace), timeout=30,
                       what="cache to equal the server after relist")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert metric("informer_relists_total", resource="buildruns") == relists + 1
    assert metric("informer_watch_restarts_total", resource="buildruns", cause="gone") >= 1
    assert deleted == [f"{namespace}/drop"]


def record_lists(kube: Kube, monkeypatch: pytest.MonkeyPatch) -> tuple[Kube, list[str]]:
    """A view of `kube` (the same connections) that notes what it is asked to list
    with: "pages", "watch-list" or "watch", in order. The real server answers; the
    test's own reads go through `kube`, unnoted."""
    kube = copy.copy(kube)
    asked: list[str] = []
    real_list, real_watch = kube.list, kube.watch

    async def list_(*args: Any, **kwargs: Any) -> JSON:
        asked.append("pages")
        return await real_list(*args, **kwargs)

    def watch(*args: Any, send_initial_events: bool = False, **kwargs: Any) -> Any:
        asked.append("watch-list" if send_initial_events else "watch")
        return real_watch(*args, send_initial_events=send_initial_events, **kwargs)

    monkeypatch.setattr(kube, "list", list_)
    monkeypatch.setattr(kube, "watch", watch)
    return kube, asked


async def informer_lists(kube: Kube, namespace: str,
                         monkeypatch: pytest.MonkeyPatch) -> tuple[Informer, list[str]]:
    """With three BuildRuns in `namespace`, runs an informer of them (pages of 2) until
    its cache equals the server's, then until it also holds one created after its list
    (the watch that follows); the informer, and what it asked to list with
    (`record_lists`)."""
    w = World(kube, namespace)
    for name in ("a", "b", "c"):
        await w.buildrun(name)
    noted, asked = record_lists(kube, monkeypatch)
    informer = Informer(noted, BUILDRUNS, namespace, page_size=2)
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_synced()
        assert cache_state(informer) == await server_state(kube, namespace)
        await w.buildrun("after")
        await wait_for(lambda: _same(informer, kube, namespace), timeout=30,
                       what="the cache to hold a BuildRun created after the list")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return informer, asked


async def test_an_informer_lists_by_watch_list_where_the_server_streams_one(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubernetes 1.34 serves watch-lists (WatchList on by default): one request brings
    the objects, then the changes; no page is asked for."""
    informer, asked = await informer_lists(kube, namespace, monkeypatch)
    assert asked == ["watch-list"] and informer.stream_lists


async def test_an_informer_lists_in_pages_where_the_server_refuses_a_watch_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server without watch-lists (here 1.34 with WatchList off: it answers 422) gets
    the paged list and then a watch, as before watch-lists, and is not asked again."""
    async with LocalCluster(tmp_path, apiserver_args=["--feature-gates=WatchList=false"]
                            ) as cluster:
        kube = Kube(await api_client_for(cluster.kubeconfig))
        try:
            await kube.create(NAMESPACES, None, {"metadata": {"name": "ns"}})
            informer, asked = await informer_lists(kube, "ns", monkeypatch)
        finally:
            await kube.close()
    assert asked[:4] == ["watch-list", "pages", "pages", "watch"]
    assert set(asked[4:]) <= {"watch"} and not informer.stream_lists


async def test_leader_hand_over_never_runs_reconciles_on_two_replicas(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    w, namespace = world, world.ns
    lease = LeaderElectionSettings(namespace=namespace, name="hand-over", lease_duration=2.0,
                                   renew_deadline=1.5, retry_period=0.2)
    intervals: list[Interval] = []

    settings = controller_settings(cluster, namespace)
    a_settings = replace(settings, leader_election=replace(lease, identity="a"))
    b_settings = replace(settings, leader_election=replace(lease, identity="b"))
    async with running_controller(a_settings, "a") as a:
        record_reconciles(a, "a", intervals)
        await wait_for(lambda: bool(a.controller("buildrun").running), what="a to lead")
        async with running_controller(b_settings, "b") as b:
            record_reconciles(b, "b", intervals)
            await w.buildrun("one")
            await w.taskrun_of("one")
            assert not b.controller("buildrun").running, "the standby started workers"
            assert b.synced(), "the standby's caches should be warm"
            a.request_stop()  # releases the lease on the way out
            await wait_for(lambda: bool(b.controller("buildrun").running), timeout=10,
                           what="b to lead")
            await w.buildrun("two")
            done = await w.finished("two", 30)
    assert condition(done)["reason"] == reasons.SUCCEEDED
    assert {i.who for i in intervals} == {"a", "b"}
    a_end = max(i.end for i in intervals if i.who == "a")
    b_start = min(i.start for i in intervals if i.who == "b")
    assert a_end <= b_start, "replicas reconciled at the same time"
    held = await kube.get(LEASES, namespace, "hand-over")
    assert held["spec"]["holderIdentity"] in ("", "b")


async def test_lost_lease_stops_reconciling_and_exits_non_zero(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    lease = LeaderElectionSettings(namespace=namespace, name="lost", identity="me",
                                   lease_duration=2.0, renew_deadline=1.0, retry_period=0.2)
    settings = replace(controller_settings(cluster, namespace), leader_election=lease)
    app = await App.create(settings, "me")
    task = asyncio.create_task(app.run(handle_signals=False))
    await wait_for(lambda: bool(app.controller("buildrun").running), what="leadership")
    # Another holder takes the lease over (as after a network partition).
    held = await kube.get(LEASES, namespace, "lost")
    held["spec"]["holderIdentity"] = "someone-else"
    await kube.request("PUT", LEASES.path(namespace, "lost"), body=held)
    code = await asyncio.wait_for(task, 10)
    assert code == 1
    assert metric("leader_election_master_status", name="lost") == 0


async def test_graceful_shutdown_finishes_in_flight_reconciles(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    w, namespace = world, world.ns
    app = await App.create(controller_settings(cluster, namespace), "graceful")
    inner = app.controller("buildrun").reconciler
    finished: list[str] = []
    started = asyncio.Event()

    class Slow:
        async def reconcile(self, key: str) -> Result:
            started.set()
            await asyncio.sleep(1.0)
            result = await inner.reconcile(key)
            finished.append(key)
            return result

        give_up = inner.give_up

    app.controller("buildrun").reconciler = Slow()
    task = asyncio.create_task(app.run(handle_signals=False))
    await w.buildrun("slow")
    await asyncio.wait_for(started.wait(), 20)
    app.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    assert f"{namespace}/slow" in finished
    assert (await w.get("slow"))["status"]["taskRunName"]


async def test_metrics_over_http_show_a_scripted_run(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    w, namespace = world, world.ns
    async with running_controller(controller_settings(cluster, namespace)) as app:
        await w.buildrun("ok")
        await w.finished("ok", 30)
        await w.buildrun("bad", build_ref="missing")
        await w.finished("bad")
        text = await scrape(app)
    lines = {line.split(" ")[0]: float(line.split(" ")[1])
             for line in text.splitlines() if line and not line.startswith("#")}
    assert lines['controller_runtime_reconcile_total{controller="buildrun",result="success"}'] >= 3
    assert lines['controller_runtime_max_concurrent_reconciles{controller="buildrun"}'] == 4
    assert lines['workqueue_adds_total{controller="buildrun",name="buildrun"}'] >= 3
    assert lines[f'buildrun_completed_total{{namespace="{namespace}",reason="Succeeded"}}'] == 1
    assert lines[f'buildrun_completed_total{{namespace="{namespace}",reason="BuildNotFound"}}'] == 1
    assert 'controller_runtime_reconcile_time_seconds_bucket{controller="buildrun",le="0.005"}' \
        in lines
    assert "process_resident_memory_bytes" in lines


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args, "--metrics-bind-address", "0",
         "--health-probe-bind-address", "0"],
        capture_output=True, text=True, timeout=60,
        env=None if env is None else {**os.environ, **env},
    )


def test_cli_bad_kubeconfig_is_one_clear_line(tmp_path: Path) -> None:
    result = run_cli("--kubeconfig", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"buildrun-controller: kubeconfig {tmp_path / 'missing'} does not exist"]


def test_cli_unreachable_server_is_one_clear_line(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    from devtools.cluster.localcluster import free_port, write_token_kubeconfig

    config = write_token_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{free_port()}",
                                    cluster.ca_file, "x", "token")
    result = run_cli("--kubeconfig", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the API server" in lines[0], result.stderr


def test_cli_bad_shipwright_setting_is_one_clear_line(cluster: LocalCluster) -> None:
    """Refused after the API server answered: one line, exit 2, and the HTTP session that
    was open by then is closed (no "Unclosed client session" on the way out)."""
    result = run_cli("--kubeconfig", str(cluster.kubeconfig),
                     env={"VULNERABILITY_COUNT_LIMIT": "many"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "VULNERABILITY_COUNT_LIMIT" in lines[0], result.stderr

"""The fault soak, short: 100 BuildRuns through two replica processes on the whole
stack (real Tekton, kwok pods; the soak starts its own) while the API server
restarts, replicas are killed, our webhook flakes, a second writer makes status
writes conflict, Tekton's webhook is stopped and started, Tekton's controller is
killed and the leader's proxy stalls. The long run is `python -m soak.run` (see
RELIABILITY.md).

Also here: what the soak found in the controller, each pinned by a focused test.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from controller.app import App
from controller.runtime.kube import LEASES, Kube
from controller.settings import LeaderElectionSettings
from devtools.cluster.localcluster import LocalCluster
from soak.accounting import from_workdir
from soak.plan import Config
from soak.run import soak
from tests.harness import controller_settings, wait_for

pytestmark = pytest.mark.cluster


@pytest.mark.timeout(500)
async def test_short_soak_loses_flips_duplicates_and_misreports_nothing(tmp_path: Path) -> None:
    cfg = Config(
        buildruns=100,
        seed=1,
        create_rate=5.0,
        apiserver_restart_every=12.0,
        kill_every=6.0,
        conflict_rate=5.0,
        tekton_webhook_stop_every=8.0,
        tekton_controller_kill_every=8.0,
        leader_stall_every=8.0,
        chaos_seconds=90.0,
        settle_seconds=120.0,
        timeout=400.0,
        workdir=tmp_path / "soak",
    )
    lines: list[str] = []
    report = await soak(cfg, lines.append)
    text = report.text()
    print(text)  # shown by pytest on failure, with the logs' folder
    assert report.created == 100, text
    assert report.lost == [], text
    assert report.flipped == [], text
    assert report.duplicated == [], text
    assert report.wrong == [], text
    # The soak must have done something, or zeros above mean nothing.
    f = report.faults
    assert f["apiserver_restarts"] >= 1, text
    assert f["kills"] >= 1, text
    assert f["label_patches_unfinished"] >= 10, text
    assert f["webhook_verdicts"].get("error", 0) + f["webhook_verdicts"].get("timeout", 0) >= 5
    assert f["tekton_webhook_stops"] >= 1 and report.retries["tekton_webhook_refused"] >= 1, text
    assert f["tekton_controller_kills"] >= 1, text
    assert f["leader_stalls"] >= 1, text
    assert report.reasons.get("ReconcilerRetriesExhausted", 0) >= 1, text  # the doomed ones
    assert report.reasons.get("TaskRunGenerationFailed", 0) == 0, text
    assert report.health["panics"] == 0, text
    assert report.health["tracebacks"] == 0, text
    # The saved workdir gives the same account of unlogged failed calls as the run did
    # (python -m soak.accounting WORKDIR, for a run long gone).
    again = from_workdir(tmp_path / "soak")
    assert dict(again.by_cause) == report.retries["unlogged_by_cause"], text


# -- found by the soak ----------------------------------------------------------------


async def test_standby_replica_survives_an_api_server_restart(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    # Someone else holds the lease, so this replica waits in acquire().
    await kube.create(LEASES, namespace, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "standby"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 3,
                 "renewTime": "2026-01-01T00:00:00.000000Z"},
    })
    lease = LeaderElectionSettings(namespace=namespace, name="standby", identity="me",
                                   lease_duration=3.0, renew_deadline=2.0, retry_period=0.2)
    settings = replace(controller_settings(cluster, namespace), leader_election=lease)
    app = await App.create(settings, "me")
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_for(app.synced, timeout=30, what="caches synced")
        assert not app.controller("buildrun").running
        # Down for a few retry periods (a plain restart re-binds the port within
        # milliseconds, and a fresh server answers Lease GETs before it is ready).
        cluster.stop_apiserver(signal.SIGKILL)
        await asyncio.sleep(1.5)
        await cluster.start_apiserver()
        await asyncio.sleep(1.0)
        assert not task.done(), f"the standby exited with {task.result()} on an API blip"
        # "other" never renews: the standby takes over once the lease has expired.
        await wait_for(lambda: app.controller("buildrun").running, timeout=30,
                       what="the standby to lead")
    finally:
        if not task.done():
            app.request_stop()
        await asyncio.wait_for(task, 30)

"""Leadership under network faults, against the real API server.

Each replica runs in-process (`controller.app.App`, as the hand-over test in
test_controller.py does) and reaches kube-apiserver through its own
`devtools.fakes.proxy.Proxy`, which can stall its connections without closing them,
reset them, hold back every answer, or stall only the connections open now. Durations are
short (lease 4 s, renew 3 s, retry 1 s) so the whole file runs in about a minute.

What must hold, whatever the network does:
- a standby takes the Lease no earlier than lease_duration after the leader's
  last renewal, and only after the old leader has stopped reconciling and exited;
- the old leader's last reconcile ends before the new leader's first begins;
- no BuildRun is lost or gets two TaskRuns;
- a write the old leader had in flight, delivered once the partition heals,
  changes nothing (it carries the resourceVersion it read).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from controller.app import App
from controller.buildrun import reasons
from controller.buildrun.reconciler import BuildRunReconciler
from controller.runtime.kube import EVENTS, JSON, LEASES, ApiError, Kube
from controller.runtime.leader import LeaderElector
from controller.runtime.timestamps import parse_time
from controller.settings import LeaderElectionSettings
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster.localcluster import LocalCluster, write_token_kubeconfig
from devtools.fakes.proxy import Proxy
from tests.conftest import api_client_for
from tests.harness import (
    Interval,
    World,
    condition,
    controller_settings,
    metric,
    record_reconciles,
    wait_for,
)

pytestmark = pytest.mark.cluster


def buildrun_kube(app: App) -> Kube:
    """The BuildRun controller's client: a view of app.kube that writes as Shipwright's
    field manager (controller/buildrun/setup.py), where its writes can be intercepted."""
    reconciler = app.controller("buildrun").reconciler
    reconciler = getattr(reconciler, "wrapped", reconciler)  # under record_reconciles
    assert isinstance(reconciler, BuildRunReconciler)
    return reconciler.kube

LEASE, RENEW, RETRY = 4.0, 3.0, 1.0


@dataclass
class Replica:
    who: str
    app: App
    task: asyncio.Task[int]
    proxy: Proxy
    led_at: float | None = None  # wall clock: when its workers started
    exited_at: float | None = None  # wall clock: when App.run returned


@dataclass
class Fleet:
    """The replicas of one test, recording every reconcile interval (as the hand-over
    test does) and, on request, stalling a replica at a chosen request."""

    cluster: LocalCluster
    namespace: str
    lease: LeaderElectionSettings
    tmp_path: Path
    intervals: list[Interval] = field(default_factory=list)
    replicas: list[Replica] = field(default_factory=list)

    async def start(self, who: str, proxy: Proxy, *,
                    prepare: Callable[[App], Any] | None = None) -> Replica:
        kubeconfig = write_token_kubeconfig(
            self.tmp_path / f"kubeconfig-{who}", proxy.url, self.cluster.ca_file,
            self.cluster.admin.name, self.cluster.admin.token)
        settings = replace(controller_settings(self.cluster, self.namespace),
                           kubeconfig=str(kubeconfig),
                           leader_election=replace(self.lease, identity=who))
        app = await App.create(settings, who)
        if prepare is not None:
            await prepare(app)
        task = asyncio.create_task(app.run(handle_signals=False), name=f"replica-{who}")
        replica = Replica(who, app, task, proxy)
        self._record(replica)
        self.replicas.append(replica)
        await wait_for(app.synced, timeout=30, what=f"{who}'s caches")
        return replica

    def _record(self, replica: Replica) -> None:
        controller = replica.app.controller("buildrun")
        record_reconciles(replica.app, replica.who, self.intervals)
        start = controller.start

        def started() -> None:
            replica.led_at = time.time()
            start()

        controller.start = started  # type: ignore[method-assign]

        def exited(_: object) -> None:
            replica.exited_at = time.time()

        replica.task.add_done_callback(exited)

    def of(self, who: str) -> list[Interval]:
        return [i for i in self.intervals if i.who == who]

    async def stop(self) -> None:
        for replica in self.replicas:
            replica.app.request_stop()
        await asyncio.gather(*(asyncio.wait_for(r.task, 30) for r in self.replicas),
                             return_exceptions=True)


@contextlib.asynccontextmanager
async def fleet(cluster: LocalCluster, namespace: str, tmp_path: Path,
                name: str, **durations: float) -> AsyncIterator[Fleet]:
    lease = LeaderElectionSettings(
        namespace=namespace, name=name, lease_duration=durations.get("lease", LEASE),
        renew_deadline=durations.get("renew", RENEW), retry_period=durations.get("retry", RETRY))
    f = Fleet(cluster, namespace, lease, tmp_path)
    try:
        yield f
    finally:
        await f.stop()


def proxy(cluster: LocalCluster) -> Proxy:
    return Proxy("127.0.0.1", cluster.port)


class LeaseLog:
    """Every distinct Lease record, read directly (not through any proxy) every 50 ms."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.records: list[JSON] = []
        self._task = asyncio.create_task(self._poll(kube, namespace, name))

    async def _poll(self, kube: Kube, namespace: str, name: str) -> None:
        while True:
            with contextlib.suppress(ApiError):
                spec = (await kube.get(LEASES, namespace, name)).get("spec") or {}
                if not self.records or self.records[-1] != spec:
                    self.records.append(spec)
            await asyncio.sleep(0.05)

    def last_renewal(self, holder: str) -> float:
        times = [r["renewTime"] for r in self.records if r.get("holderIdentity") == holder]
        return _wall(times[-1])

    def stop(self) -> None:
        self._task.cancel()


def _wall(micro_time: str) -> float:
    parsed = parse_time(micro_time)
    assert parsed is not None
    return parsed.timestamp()


async def versions(kube: Kube, namespace: str) -> dict[str, str]:
    """What a controller's write would change: the resourceVersion of every BuildRun, and
    of every TaskRun its metadata and spec (a controller creates TaskRuns and cancels them
    through spec.status). Not a TaskRun's resourceVersion: its status is Tekton's to
    write, and a whole make test once saw a finished TaskRun's resourceVersion move
    between this test's two reads (taskruns/during-3: 10800 -> 10820, 2026-12-06); no
    write of a controller's to a TaskRun touches its status."""
    out = {}
    for item in (await kube.list(BUILDRUNS, namespace))["items"]:
        out[f"buildruns/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    for item in (await kube.list(TASKRUNS, namespace))["items"]:
        meta = item["metadata"]
        out[f"taskruns/{meta['name']}"] = orjson.dumps(
            [meta.get("labels"), meta.get("annotations"), meta.get("ownerReferences"),
             item.get("spec")], option=orjson.OPT_SORT_KEYS).decode()
    return out


async def finish_all(kube: Kube, w: World, names: list[str]) -> None:
    """Each BuildRun has exactly one TaskRun; Tekton runs each to Succeeded."""
    for name in names:
        await w.taskrun_of(name, timeout=30)
    taskruns = await w.taskruns()
    owners = sorted(t["metadata"]["labels"][LABEL_BUILDRUN] for t in taskruns)
    assert owners == sorted(names), "a BuildRun lost, or one with two TaskRuns"
    for name in names:
        assert condition(await w.finished(name, timeout=30))["reason"] == reasons.SUCCEEDED


async def test_a_stalled_leader_exits_before_the_standby_takes_over(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
) -> None:
    w = world
    async with proxy(cluster) as pa, proxy(cluster) as pb, \
            fleet(cluster, w.ns, tmp_path, "partition") as f:
        a = await f.start("a", pa)
        await wait_for(lambda: a.led_at, what="a to lead")
        b = await f.start("b", pb)
        before = [f"before-{i}" for i in range(3)]
        for name in before:
            await w.buildrun(name)
        for name in before:
            await w.taskrun_of(name)

        # Partition a just as it sends the status write of a BuildRun it is starting:
        # that write (and its lease renewal) stay in flight, held by the proxy.
        target = "during-0"
        stalled: dict[str, float] = {}
        client = buildrun_kube(a.app)
        put = client.put  # every status write is an update of the status subresource

        async def stalling_put(resource: Any, namespace: Any, name: str, body: Any,
                               **kw: Any) -> JSON:
            if name == target and kw.get("subresource") == "status" and not stalled:
                pa.stall()
                stalled.update(wall=time.time(), mono=time.monotonic(),
                               rv=float(body["metadata"]["resourceVersion"]))
            return await put(resource, namespace, name, body, **kw)

        client.put = stalling_put  # type: ignore[method-assign]
        leases = LeaseLog(kube, w.ns, "partition")
        during = [f"during-{i}" for i in range(5)]
        for name in during:
            await w.buildrun(name)
        await wait_for(lambda: stalled, what="a to send the status write")
        await wait_for(lambda: b.led_at, timeout=20, what="b to lead")
        # Waits past the client's 30 s request timeout, so that a leader whose renewal
        # is not bounded fails the assertions below instead of this wait.
        code = await asyncio.wait_for(a.task, 45)
        await finish_all(kube, w, before + during)

        held = await kube.get(LEASES, w.ns, "partition")
        a_last_renewal = leases.last_renewal("a")
        b_acquired = _wall(held["spec"]["acquireTime"])
        leases.stop()
        assert code == 1
        assert held["spec"]["holderIdentity"] == "b"
        assert a.exited_at is not None and b.led_at is not None
        takeover_after_renewal = b_acquired - a_last_renewal
        print(f"\nstall -> a exits {a.exited_at - stalled['wall']:.2f} s, "
              f"b acquires {b_acquired - stalled['wall']:.2f} s, b leads "
              f"{b.led_at - stalled['wall']:.2f} s; a's last renewal -> b acquires "
              f"{takeover_after_renewal:.2f} s")
        # The standby waited a whole lease duration after a's last renewal (its clock
        # started when it saw that renewal, after a stamped it), and a was gone by then.
        assert b.led_at - a_last_renewal >= LEASE
        assert a.exited_at < b_acquired
        a_end = max(i.end for i in f.of("a"))
        b_start = min(i.start for i in f.of("b"))
        assert a_end <= b_start, "two replicas reconciled at once"

        # Heal the partition: what a had in flight reaches the server now, and changes
        # nothing (its status write and lease renewal carry stale resourceVersions).
        settled = await versions(kube, w.ns)
        events_before = len((await kube.list(EVENTS, w.ns))["items"])
        sent_before = pa.bytes_up
        pa.resume()
        await wait_for(lambda: pa.open_connections() == 0, timeout=30,
                       what="a's held connections to be delivered and closed")
        print(f"after the stall lifted: {pa.bytes_up - sent_before} bytes of a's requests "
              f"delivered, {len((await kube.list(EVENTS, w.ns))['items']) - events_before} "
              "Events landed")
        assert pa.bytes_up > sent_before, "the proxy held none of a's requests"
        assert await versions(kube, w.ns) == settled, "a stale write landed"
        assert (await kube.get(LEASES, w.ns, "partition"))["spec"]["holderIdentity"] == "b"


async def test_a_write_held_in_a_partition_lands_late_unless_it_carries_its_version(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
) -> None:
    # The control for the test above: a status write held in a partition reaches the
    # server after the new leader wrote, and only its resourceVersion keeps it out.
    # The writer waits for its answer here (the old leader would have cancelled it,
    # which may or may not stop the server from applying it: nothing to rely on).
    w = world
    await w.buildrun("held")
    async with proxy(cluster) as p:
        config = write_token_kubeconfig(tmp_path / "kc", p.url, cluster.ca_file,
                                        cluster.admin.name, cluster.admin.token)
        stale = Kube(await api_client_for(config))
        try:
            # Ours, as write_status sends it: the object as read with its status replaced
            # (an update, which the API server refuses without a resourceVersion for a
            # custom resource); the control: a merge patch without one.
            for carries_version in (True, False):
                read = await w.get("held")
                status = {"taskRunName": f"stale-{carries_version}".lower()}
                p.stall()
                write = asyncio.create_task(
                    stale.put(BUILDRUNS, w.ns, "held", {**read, "status": status},
                              subresource="status") if carries_version else
                    stale.patch(BUILDRUNS, w.ns, "held", {"status": status},
                                subresource="status"))
                await asyncio.sleep(0.5)
                assert not write.done()
                await kube.patch(BUILDRUNS, w.ns, "held", {"status": {"taskRunName": "new"}},
                                 subresource="status")
                p.resume()
                outcome = (await asyncio.gather(write, return_exceptions=True))[0]
                written = (await w.get("held"))["status"]["taskRunName"]
                if carries_version:
                    assert isinstance(outcome, ApiError) and outcome.status == 409, outcome
                    assert written == "new"
                else:
                    assert not isinstance(outcome, BaseException), outcome
                    assert written == "stale-false"  # landed over the new leader's write
            unversioned = {**await w.get("held"), "status": {"taskRunName": "x"}}
            del unversioned["metadata"]["resourceVersion"]
            refused = await asyncio.gather(stale.put(BUILDRUNS, w.ns, "held", unversioned,
                                                     subresource="status"),
                                           return_exceptions=True)
            assert isinstance(refused[0], ApiError) and refused[0].status == 422, refused
        finally:
            await stale.close()


@pytest.mark.parametrize("lands", ["before-the-new-leader-acts", "after-it-created-it"])
async def test_a_taskrun_create_delivered_after_the_lease_was_lost_is_never_a_second(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path, lands: str,
) -> None:
    """Issue 26.3: a leader sends a BuildRun's TaskRun create into a partition, loses its
    Lease and exits; the create reaches the API server only later. The TaskRun's name is
    derived from the BuildRun (phases.run_name), so whichever create lands second
    meets AlreadyExists: landed first, a's TaskRun is adopted by the new leader (its
    owner is the BuildRun's uid); landed after b's, it is refused. Either way: one
    TaskRun, the BuildRun ends once with its pod's outcome, and nothing changes after.

    The create goes out on a connection of its own that outlives a (`late`), as a
    request does whose sender hangs rather than exits: a that exits closes its TLS
    sessions, and kube-apiserver (Go's net/http) then cancels a request it has not
    finished, so the late create would never land at all (seen: 404 after delivery)."""
    w = world
    async with proxy(cluster) as pa, proxy(cluster) as pb, \
            fleet(cluster, w.ns, tmp_path, "late") as f:
        a = await f.start("a", pa)
        await wait_for(lambda: a.led_at, what="a to lead")
        late = Kube(await api_client_for(tmp_path / "kubeconfig-a"))  # through pa too
        await late.list(TASKRUNS, w.ns)  # its connection is open before the partition
        held: dict[str, Any] = {}
        client = buildrun_kube(a.app)
        create = client.create

        async def stalling_create(resource: Any, namespace: Any, body: JSON) -> JSON:
            labels = body["metadata"].get("labels") or {}
            if resource != TASKRUNS or labels.get(LABEL_BUILDRUN) != "late" or held:
                return await create(resource, namespace, body)
            pa.stall()  # this request, and a's lease renewals, wait in the proxy
            held.update(name=body["metadata"]["name"], at=time.time(),
                        task=asyncio.create_task(late.create(resource, namespace, body)))
            return await asyncio.shield(held["task"])

        try:
            client.create = stalling_create  # type: ignore[method-assign]
            await w.buildrun("late")
            await wait_for(lambda: held, what="a to send the TaskRun create")
            assert await asyncio.wait_for(a.task, 45) == 1, "a should exit on the lost lease"
            assert await kube.get_or_none(TASKRUNS, w.ns, held["name"]) is None  # in flight

            async def delivered() -> Any:
                pa.resume()
                return (await asyncio.gather(held["task"], return_exceptions=True))[0]

            if lands == "before-the-new-leader-acts":
                landed = await delivered()
                assert not isinstance(landed, BaseException), landed
                first = await kube.get(TASKRUNS, w.ns, held["name"])  # a's, after it exited
                b = await f.start("b", pb)
                await wait_for(lambda: b.led_at, timeout=20, what="b to lead")
            else:
                b = await f.start("b", pb)
                await wait_for(lambda: b.led_at, timeout=20, what="b to lead")
                assert await w.taskrun_of("late", timeout=30) == held["name"]
                first = await kube.get(TASKRUNS, w.ns, held["name"])  # b's
                refused = await delivered()
                assert isinstance(refused, ApiError) and refused.status == 409, refused
        finally:
            await late.close()
        done = await w.finished("late", timeout=30)
        assert condition(done)["reason"] == reasons.SUCCEEDED, condition(done)
        assert done["status"]["taskRunName"] == held["name"]
        [taskrun] = await w.taskruns()
        assert taskrun["metadata"]["uid"] == first["metadata"]["uid"]
        assert taskrun["metadata"]["ownerReferences"][0]["uid"] == done["metadata"]["uid"]
        assert b.led_at is not None and b.led_at > held["at"]
        settled = await versions(kube, w.ns)
        await asyncio.sleep(2 * RETRY)  # b keeps leading; nothing may flip
        assert await versions(kube, w.ns) == settled


async def test_a_silent_watch_is_noticed_and_resumed(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
) -> None:
    # Only the leader's watch connections go silent (half-open); its requests work, so
    # it keeps the lease, and it must notice the silence by itself.
    w = world
    async with proxy(cluster) as requests, proxy(cluster) as watches, \
            fleet(cluster, w.ns, tmp_path, "silent-watch") as f:
        config = write_token_kubeconfig(tmp_path / "kc-watch", watches.url, cluster.ca_file,
                                        cluster.admin.name, cluster.admin.token)
        watch_kube = Kube(await api_client_for(config))

        async def watch_through_own_proxy(app: App) -> None:
            for informer in app.informers.all():
                informer.kube = watch_kube
                informer.watch_timeout = 2  # the server ends each watch after 2-4 s

        try:
            a = await f.start("a", requests, prepare=watch_through_own_proxy)
            await wait_for(lambda: a.led_at, what="a to lead")
            restarts = metric("informer_watch_restarts_total", resource="buildruns",
                              cause="error")
            watches.stall_open()
            stalled_at = time.monotonic()
            await w.buildrun("unseen")
            await w.taskrun_of("unseen", timeout=20)
            print(f"\nsilent watch: BuildRun reconciled {time.monotonic() - stalled_at:.1f} s "
                  "after the watch went silent")
            assert metric("informer_watch_restarts_total", resource="buildruns",
                          cause="error") > restarts
            assert not a.task.done()
            held = await kube.get(LEASES, w.ns, "silent-watch")
            assert held["spec"]["holderIdentity"] == "a"
        finally:
            await f.stop()
            await watch_kube.close()


async def test_slow_answers_keep_the_leader_and_reconciles_complete(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
) -> None:
    # Every answer to the leader arrives 2 s late. A renewal is sent only once the
    # previous one answered, and must answer before renew_deadline after that one was
    # sent: so it holds while 2 x 2 s < renew_deadline (5 s here; with 3 s it would
    # give up the lease, safely, as the stall test shows).
    w = world
    async with proxy(cluster) as pa, proxy(cluster) as pb, \
            fleet(cluster, w.ns, tmp_path, "slow", lease=6.0, renew=5.0, retry=1.0) as f:
        a = await f.start("a", pa)
        await wait_for(lambda: a.led_at, what="a to lead")
        b = await f.start("b", pb)
        pa.response_delay = 2.0
        slow_from = time.monotonic()
        names = [f"slow-{i}" for i in range(3)]
        for name in names:
            await w.buildrun(name)
        await finish_all(kube, w, names)
        await asyncio.sleep(max(0.0, 15.0 - (time.monotonic() - slow_from)))
        assert not a.task.done() and b.led_at is None, "the slow leader lost the lease"
        assert (await kube.get(LEASES, w.ns, "slow"))["spec"]["holderIdentity"] == "a"
        assert {i.who for i in f.intervals} == {"a"}


async def test_dropped_connections_cost_the_leader_nothing(
    cluster: LocalCluster, kube: Kube, world: World, tmp_path: Path,
) -> None:
    # Every connection of the leader reset, twice a second for 5 s: each failed
    # request fails fast and the next one reconnects, so it keeps the lease.
    w = world
    async with proxy(cluster) as pa, proxy(cluster) as pb, \
            fleet(cluster, w.ns, tmp_path, "drops") as f:
        a = await f.start("a", pa)
        await wait_for(lambda: a.led_at, what="a to lead")
        b = await f.start("b", pb)
        names = [f"dropped-{i}" for i in range(3)]
        for name in names:
            await w.buildrun(name)
        for _ in range(10):
            pa.drop()
            await asyncio.sleep(0.5)
        await finish_all(kube, w, names)
        assert not a.task.done() and b.led_at is None, "dropped connections cost the lease"
        assert {i.who for i in f.intervals} == {"a"}


LEASE_SHAPES: list[tuple[str, JSON, bool]] = [
    # (what, spec as written by hand, is it held by someone else)
    ("empty spec", {}, False),
    ("holder only", {"holderIdentity": ""}, False),
    ("a holder that never renewed", {"holderIdentity": "ghost"}, True),
    ("a renewTime far in the future", {"holderIdentity": "ghost", "leaseDurationSeconds": 2,
                                       "renewTime": "2999-01-01T00:00:00.000000Z"}, True),
    ("transitions but no holder", {"leaseTransitions": 7, "leaseDurationSeconds": 3600}, False),
]


@pytest.mark.parametrize(("what", "spec", "held"), LEASE_SHAPES,
                         ids=[s[0] for s in LEASE_SHAPES])
async def test_a_lease_edited_by_hand_does_not_crash_a_replica(
    kube: Kube, namespace: str, what: str, spec: JSON, held: bool,
) -> None:
    name = "hand-edited"
    await kube.create(LEASES, namespace, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name}, "spec": spec})
    settings = LeaderElectionSettings(namespace=namespace, name=name, identity="me",
                                      lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)
    started = time.monotonic()
    await asyncio.wait_for(LeaderElector(kube, settings).acquire(), 10)
    waited = time.monotonic() - started
    lease = await kube.get(LEASES, namespace, name)
    assert lease["spec"]["holderIdentity"] == "me"
    # A foreign holder is waited out for its lease duration (ours when it has none).
    assert (waited >= float(spec.get("leaseDurationSeconds", 2.0))) if held else waited < 1.0


@pytest.mark.parametrize("spec", [
    {"holderIdentity": 42},
    {"leaseDurationSeconds": "long"},
    {"leaseDurationSeconds": 0},
    {"renewTime": "yesterday"},
    {"leaseTransitions": -1},
])
async def test_the_api_server_refuses_lease_garbage_of_the_wrong_type(
    kube: Kube, namespace: str, spec: JSON,
) -> None:
    # What the unit tests feed the elector beyond this (spec null or a list, a number
    # for a holder) never gets past the Lease's schema on a real server.
    with pytest.raises(ApiError) as refused:
        await kube.create(LEASES, namespace, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "garbage"}, "spec": spec})
    assert refused.value.status in (400, 422)

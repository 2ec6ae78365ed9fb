"""Reconcile throughput and latency against a real kube-apiserver, and that server's ceiling.

    .venv/bin/python -m bench.e2e.throughput --n 1000 5000 10000 --workers 16
    .venv/bin/python -m bench.e2e.throughput --mode bare mirror --n 1000 5000 10000
    .venv/bin/python -m bench.e2e.throughput --n 1000 --workers 1 4 16     # concurrency
    .venv/bin/python -m bench.e2e.throughput --mode controller peer --repeat 2 --n 10000

(`make peer` builds Shipwright's controller first; the last command is what
BENCHMARKS-journal.md's "Peer" section runs.)

Each run gets a fresh etcd + kube-apiserver (LocalCluster, loopback), a namespace
with one BuildStrategy and one Build, and the benchmark's own watch on BuildRuns
(Observer). Then, by --mode:

controller  `python -m controller` as a subprocess (--max-concurrent-reconciles W).
            Start phase: N BuildRuns are created, --concurrency at a time; the time
            each create returned is recorded, and the Observer records when each
            BuildRun first shows status.taskRunName. Reported: time from the first
            create to the last BuildRun with a TaskRun, N / that time, and p50/p99 of
            create-returned -> taskRunName-seen. Finish phase: TektonStatusWriter (the
            labelled stand-in for Tekton) finishes every TaskRun (success), --concurrency
            at a time; reported: p50/p99 of TaskRun-finish-returned -> BuildRun
            completionTime seen, and the phase's total time.
bare        No controller: this process does the controller's API work itself, per
            BuildRun, --concurrency at a time, with the bodies the controller sends
            (made by the controller's own functions, not copies of them): create the
            BuildRun; the label PATCH (reconciler.build_link: the Build's name and
            generation labels, a merge patch of metadata, which a /status write cannot
            carry); create the TaskRun (taskrun.generate_taskrun for the bench's Build
            and strategy, ServiceAccount `default`: about 4.3 KB of JSON); update the
            BuildRun's status (the BuildRun as read with the status
            status_writes.started makes: taskRunName, executor, buildSpec, the Pending
            condition, PUT to its status subresource). Finish phase:
            TektonStatusWriter's TaskRun status patch (as in the controller run), then
            the controller's terminal status update (status_writes.finished with the
            state table's decision for the outcome of outcomes.outcome_from_taskrun).
            The controller's writes name its field manager
            (bodies.as_controller), the create none (the User-Agent's, as when this
            script creates the BuildRuns for a controller), so the BuildRun carries
            a controller run's managedFields entries. This is the API server's ceiling for
            that work on this machine: the same writes without a controller's watches
            (the Observer's BuildRun watch is there in every mode).
mirror      Like bare, plus the requests the controller makes that change nothing:
            finish: GET of the TaskRun's pod (its ramp-up metrics; 404 with the
            simulator) and the outcome Event, in line. (Build and BuildStrategy come
            from its caches.) Tells a gap between bare and the controller made by
            request count from one made by controller code.
watched     Bare, plus every watch our controller holds open, in a process of their
            own (bench.e2e.watchers: the controller's own informers, as
            controller.app.wire asks for them: BuildRuns, Builds, both strategy kinds,
            ServiceAccounts, Secrets' metadata, the BuildRuns' label-selected TaskRuns
            and pods), listed, watched and cached, and nothing else of a controller: the
            limit of a controller on this machine, since no controller works without its
            watches and the API server pays each write's fan-out to them. Its CPU is
            reported in the controller's column.
peer        Shipwright's own controller (v0.20.13, bench.e2e.peer) in place of ours, on
            a cluster with Shipwright's CRDs (conversion None) and the TaskRun CRD
            served at v1 and v1beta1; BUILDRUN_MAX_CONCURRENT_RECONCILES = W
            (--peer-workers, default --workers). The same phases, timed the same way
            (it writes status.taskRunName too, and completionTime when the TaskRun
            finished). It records no Events.

--writes on-event makes watched's limit a controller with no logic: this process only
creates the BuildRuns, as in a controller run (the user's burst: 5,000 in about 9 s
here), and the watchers' process sends each one's start writes when its informer
delivers it, --workers at a time (bench.e2e.watchers --writers). The default, chained,
sends each BuildRun's create and writes in one chain from this process, --concurrency
chains at a time: smoother arrivals than any controller meets, for which etcd spent
6-12 % less CPU per start than in ours' runs (BENCHMARKS-journal.md, issue 42 part 2,
2026-12-07).

controller and peer runs first take one warm-up BuildRun through the whole cycle
(created, TaskRun, finished, completionTime), untimed: Shipwright's controller
starts some informers (ServiceAccounts, Pods) only at its first reconcile that needs
them, and has no readiness probe; ours is ready at /readyz and gets the same warm-up.
Figures per phase: BuildRuns/s, p50/p99 latency, controller and API-server CPU ms per
BuildRun, requests per BuildRun by verb and resource (apiserver_request_total), the
controller's peak RSS (VmHWM) at the end of the phase. --repeat K runs the whole list
K times, the modes alternating for each N (back to back, one fresh cluster per run).

--client raw (default) sends bare/mirror requests with controller.runtime.kube.Kube (the
kubernetes_asyncio session with orjson, as the controller does); --client k8s with
kubernetes_asyncio's generated CustomObjectsApi/CoreV1Api.

CPU seconds of the controller, kube-apiserver, etcd and this process are read from
/proc for each phase, and a speed probe (common.speed_probe: ms of CPU a fixed piece of
work takes here) is run before and after each run, so runs compared can be told apart
when the host's speed moved between them. With both controller and watched runs,
a last table sets each controller run's start against the watched runs just before
and after it and their mean (`--mode watched controller watched peer --repeat 2`:
a limit measured on both sides of ours, so a drift of the host's speed between runs
cancels to first order). Raw figures go to bench/results/e2e-throughput-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.e2e import peer
from bench.e2e.bodies import Client, finished_status, now_text, start_writes
from bench.e2e.common import (
    NS,
    Controller,
    CpuMeter,
    Observer,
    Watchers,
    apiserver_pprof,
    apiserver_requests,
    bounded,
    load_kube,
    log,
    machine,
    per_buildrun_ms,
    per_object,
    report,
    requests_text,
    server_pids,
    speed_probe,
    start_py_spy,
    stop_py_spy,
    summary,
    wait_quiet,
    warm_up,
)
from controller.runtime.kube import JSON
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.fixtures import API
from devtools.cluster.localcluster import LocalCluster
from devtools.fakes.tekton import TektonStatusWriter


def event_body(buildrun: JSON, reason: str, message: str) -> JSON:
    meta = buildrun["metadata"]
    now = now_text()
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": API, "kind": "BuildRun", "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta["uid"]},
        "type": "Normal", "reason": reason, "message": message,
        "source": {"component": "bench"}, "reportingComponent": "bench",
        "reportingInstance": "bench", "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


@contextlib.asynccontextmanager
async def cluster_for(mode: str, workdir: Path, apiserver_args: list[str],
                      crds: str = "own") -> AsyncIterator[LocalCluster]:
    """A fresh etcd + kube-apiserver: our CRDs, or for `peer` (or with crds
    "shipwright", for every mode) Shipwright's (bench.e2e.peer)."""
    cluster = LocalCluster(workdir / "cluster", apiserver_args=apiserver_args)
    try:
        if mode == "peer" or crds == "shipwright":
            await peer.start_cluster(cluster)
        else:
            await cluster.start()
        yield cluster
    finally:
        cluster.stop()


async def one_run(mode: str, n: int, workers: int, args: argparse.Namespace,
                  workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": mode, "n": n, "concurrency": args.concurrency,
                           "quiet_before": await wait_quiet(max_wait=args.quiet_wait),
                           "load_before": machine()["loadavg"],
                           "probe_before_ms": speed_probe()}
    deadline = time.monotonic() + args.timeout  # after the wait for a quiet machine
    driven = mode in ("controller", "peer")
    if driven:
        out["workers"] = workers
    else:
        out["client"] = args.client
        out["writes"] = args.writes
        if args.writes == "on-event":
            out["workers"] = workers
    if mode == "peer":
        out["peer"] = peer.describe()
    extra_args = ["--profiling=true"] if args.apiserver_pprof else []
    out["crds"] = "shipwright" if mode == "peer" else args.crds
    async with cluster_for(mode, workdir, extra_args, args.crds) as cluster:
        kube = await load_kube(cluster)
        ctl: Controller | None = None
        observer = Observer(cluster)
        watchers: Watchers | None = None
        try:
            strategy, build = await fixtures.setup_namespace(kube, NS)
            # Shipwright needs one; ours runs TaskRuns as `default` (no `pipeline` here).
            await peer.add_service_account(kube)
            pids = server_pids(cluster)
            if mode == "controller":
                ctl = Controller(cluster.kubeconfig, workdir / "controller.log", workers=workers,
                                 extra=args.controller_args, cwd=args.controller_cwd)
            elif mode == "peer":
                ctl = peer.ShipwrightController(cluster.kubeconfig, workdir / "peer.log",
                                                workers=workers, workdir=workdir)
            await observer.start(deadline)
            if mode == "watched":
                watchers = Watchers(cluster.kubeconfig, workdir / "watchers.log",
                                    writers=workers if args.writes == "on-event" else 0)
                await watchers.start()
                out["startup"] = {"readyz": round((await watchers.wait_ready(120))[1], 3)}
                pids["controller"] = watchers.pid
            if ctl is not None:
                await ctl.start()
                live, ready = await ctl.wait_ready(120)
                out["startup"] = ({"healthz": round(live, 3), "readyz": round(ready, 3)}
                                  if mode == "controller" else {"metrics": round(live, 3)})
                out["startup"]["warm_up"] = round(await warm_up(kube, observer, deadline), 3)
                pids["controller"] = ctl.pid
                rec0 = await ctl.reconciles()
            names = [f"br-{i:06d}" for i in range(n)]
            meter = CpuMeter(pids)
            client = Client(kube, args.client)
            uids: dict[str, JSON] = {}

            async def create(name: str) -> None:
                await kube.create(BUILDRUNS, NS, fixtures.buildrun(name))

            async def bare(name: str) -> None:
                br = await client.create("buildruns", fixtures.buildrun(name), by_user=True)
                uids[name] = await start_writes(client, br, build, strategy)

            on_event = watchers is not None and args.writes == "on-event"
            work: Callable[[str], Awaitable[None]] = create if driven or on_event else bare
            log(f"{mode} n={n} workers={workers if ctl or on_event else '-'}: start phase")
            spy = await start_py_spy(ctl.pid, f"start-n{n}-w{workers}") if (
                mode == "controller" and ctl and "start" in args.py_spy) else None
            req0 = await apiserver_requests(cluster)
            pprof = asyncio.create_task(apiserver_pprof(
                cluster, f"{mode}-n{n}", seconds=args.apiserver_pprof)) if (
                    args.apiserver_pprof and "start" in args.apiserver_pprof_phases) else None
            meter.start()
            t0 = time.monotonic()
            created = await bounded(names, work, concurrency=args.concurrency, deadline=deadline)
            await observer.wait("taskrun", names, deadline)
            last = max(observer.taskrun_at[x] for x in names)
            start_cpu = meter.stop()
            req1 = await apiserver_requests(cluster)
            if spy is not None:
                out["py_spy"] = await stop_py_spy(spy)
            if pprof is not None:
                out["apiserver_pprof"] = await pprof
            # For bare/mirror, `created` records when the whole sequence returned; the
            # create itself returned earlier, so latency there is not comparable: skip it.
            start: dict[str, Any] = {
                "seconds": round(last - t0, 3),
                "throughput": round(n / (last - t0), 1),
                "creates_seconds": round(created.seconds, 3),
                "transient_retries": created.retries,
                "cpu": start_cpu,
                "cpu_ms_per_buildrun": per_buildrun_ms(start_cpu, n),
                "requests_per_buildrun": per_object(req0, req1, n),
            }
            if ctl is not None:
                lat = [observer.taskrun_at[x] - created.done_at[x] for x in names]
                start["latency"] = summary(lat)
                rec1 = await ctl.reconciles()
                start["reconciles"] = sum(rec1.values()) - sum(rec0.values())
                start["cpu_per_reconcile_ms"] = round(
                    1000 * start_cpu["controller"] / max(start["reconciles"], 1), 3)
                start["usage"] = vars(ctl.usage())
            out["start"] = start
            log(f"  start: {start}")

            if not args.no_finish:
                sim = TektonStatusWriter(kube)

                async def finish(name: str) -> None:
                    await sim.finish(NS, observer.taskrun_name[name])

                async def finish_bare(name: str) -> None:
                    # The simulator's TaskRun status patch, then the controller's finish.
                    tr = await sim.finish(NS, observer.taskrun_name[name])
                    br = uids[name]
                    status = finished_status(br["status"], tr)
                    await client.update_status(br, status)
                    if mode == "mirror":
                        await client.get_pod(tr["status"]["podName"])
                        cond = status["conditions"][0]
                        await client.event(event_body(br, cond["reason"], cond["message"]))

                fwork: Callable[[str], Awaitable[None]] = finish if driven else finish_bare
                spy = await start_py_spy(ctl.pid, f"finish-n{n}-w{workers}") if (
                    mode == "controller" and ctl and "finish" in args.py_spy) else None
                rec1 = await ctl.reconciles() if ctl else {}
                dropped0 = await ctl.events_dropped() if mode == "controller" and ctl else 0
                log("  finish phase")
                req1 = await apiserver_requests(cluster)
                pprof = asyncio.create_task(apiserver_pprof(
                    cluster, f"{mode}-n{n}-finish", seconds=args.apiserver_pprof)) if (
                        args.apiserver_pprof and "finish" in args.apiserver_pprof_phases
                    ) else None
                meter.start()
                t1 = time.monotonic()
                finished = await bounded(names, fwork, concurrency=args.concurrency,
                                         deadline=deadline)
                await observer.wait("done", names, deadline)
                last = max(observer.done_at[x] for x in names)
                fin_cpu = meter.stop()
                if spy is not None:
                    out["py_spy_finish"] = await stop_py_spy(spy)
                if pprof is not None:
                    out["apiserver_pprof_finish"] = await pprof
                fin: dict[str, Any] = {
                    "seconds": round(last - t1, 3),
                    "throughput": round(n / (last - t1), 1),
                    "finishes_seconds": round(finished.seconds, 3),
                    "transient_retries": finished.retries,
                    "cpu": fin_cpu,
                    "cpu_ms_per_buildrun": per_buildrun_ms(fin_cpu, n),
                }
                fin["requests_per_buildrun"] = per_object(
                    req1, await apiserver_requests(cluster), n)
                if ctl is not None:
                    lat = [observer.done_at[x] - finished.done_at[x] for x in names]
                    fin["latency"] = summary(lat)
                    rec2 = await ctl.reconciles()
                    fin["reconciles"] = sum(rec2.values()) - sum(rec1.values())
                    fin["cpu_per_reconcile_ms"] = round(
                        1000 * fin["cpu"]["controller"] / max(fin["reconciles"], 1), 3)
                    fin["reconcile_results"] = rec2
                    fin["usage"] = vars(ctl.usage())
                if mode == "controller" and ctl is not None:
                    fin["events"] = await drain_events(ctl, cluster, req1, dropped0, n)
                out["finish"] = fin
                log(f"  finish: {fin}")
        finally:
            await observer.stop()
            if watchers is not None:
                out["exit_code"] = await watchers.stop()
            if ctl is not None:
                out["exit_code"] = await ctl.stop()
            await kube.close()
    out["observer_events"] = observer.events
    out["load_after"] = machine()["loadavg"]
    out["probe_after_ms"] = speed_probe()
    return out


async def drain_events(ctl: Controller, cluster: LocalCluster, before: dict[str, int],
                       dropped0: int, n: int) -> dict[str, Any]:
    """The recorder posts Events after the status write, or drops them when its
    backlog is full: each finished BuildRun records one (its outcome). Reports how
    many were posted within the phase and how many dropped, and waits (up to 120 s,
    outside the phase's time) until each of the N was posted or dropped."""
    def posted(now: dict[str, int]) -> int:
        return now.get("POST events", 0) - before.get("POST events", 0)

    in_phase = posted(await apiserver_requests(cluster))
    t = time.monotonic()
    while True:
        total, dropped = posted(await apiserver_requests(cluster)), (
            await ctl.events_dropped() - dropped0)
        if total + dropped >= n or time.monotonic() - t > 120:
            return {"posted_in_phase": in_phase, "posted_after": total - in_phase,
                    "dropped": dropped, "drain_seconds": round(time.monotonic() - t, 2)}
        await asyncio.sleep(0.5)


def mode_label(run: dict[str, Any]) -> str:
    """"controller", or for a scripted mode its client and its shape: "watched (raw)",
    "watched (raw, on-event)"."""
    if "client" not in run:
        return str(run["mode"])
    shape = ", on-event" if run.get("writes") == "on-event" else ""
    return f"{run['mode']} ({run['client']}{shape})"


def table(runs: list[dict[str, Any]]) -> str:
    rows = ["| mode | N | workers | start s | BuildRuns/s | p50 s | p99 s | finish s | "
            "finish/s | finish p50 s | finish p99 s | finish Events posted (+ after) / dropped "
            "| ctl CPU ms/reconcile | CPU s ctl / apiserver / etcd / bench | load 1m before | "
            "busy before |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|"]
    for r in runs:
        s, f = r["start"], r.get("finish", {})
        lat, flat = s.get("latency", {}), f.get("latency", {})
        cpu = s["cpu"]
        ev = f.get("events")
        events = (f"{ev['posted_in_phase']:,} (+{ev['posted_after']:,}) / {ev['dropped']:,}"
                  if ev else "-")
        rows.append(
            f"| {mode_label(r)}"
            " "
            f"| {r['n']:,} | {r.get('workers', '-')} "
            f"| {s['seconds']:.1f} | {s['throughput']:,.0f} | {lat.get('p50', '-')} "
            f"| {lat.get('p99', '-')} | {f.get('seconds', '-')} "
            f"| {f.get('throughput', '-')} | {flat.get('p50', '-')} | {flat.get('p99', '-')} "
            f"| {events} | {s.get('cpu_per_reconcile_ms', '-')} "
            f"| {cpu.get('controller', '-')} / {cpu.get('apiserver')} / {cpu.get('etcd')} / "
            f"{cpu.get('bench')} | {r['load_before'][0]} | {r['quiet_before']['busy_2s']} |")
    return "\n".join(rows)


def phase_table(runs: list[dict[str, Any]]) -> str:
    """The figures per phase, one row per run and phase (issue 17's list)."""
    rows = ["| mode | N | workers | phase | BuildRuns/s | p50 s | p99 s | ctl CPU ms/BuildRun | "
            "apiserver CPU ms/BuildRun | etcd CPU ms/BuildRun | requests per BuildRun | "
            "ctl peak RSS MiB | load 1m before | machine: others / steal CPU s | "
            "speed probe ms before / after |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|"]
    for r in runs:
        for phase in ("start", "finish"):
            ph = r.get(phase)
            if not ph:
                continue
            lat, ms = ph.get("latency", {}), ph["cpu_ms_per_buildrun"]
            hwm = ph.get("usage", {}).get("hwm_kib")
            rows.append(
                f"| {mode_label(r)} "
                f"| {r['n']:,} | {r.get('workers', '-')} | {phase} | {ph['throughput']:,.0f} "
                f"| {lat.get('p50', '-')} | {lat.get('p99', '-')} "
                f"| {ms.get('controller', '-')} | {ms.get('apiserver')} | {ms.get('etcd')} "
                f"| {requests_text(ph['requests_per_buildrun'])} "
                f"| {'-' if hwm is None else round(hwm / 1024, 1)} | {r['load_before'][0]} "
                f"| {ph['cpu'].get('others', '-')} / {ph['cpu'].get('steal', '-')} "
                f"| {r.get('probe_before_ms', '-')} / {r.get('probe_after_ms', '-')} |")
    return "\n".join(rows)


def _neighbour(runs: list[dict[str, Any]], i: int, mode: str, step: int) -> dict[str, Any] | None:
    """The nearest run of `mode` with run i's N, going from i by `step` (-1 or 1)."""
    j = i + step
    while 0 <= j < len(runs):
        if runs[j]["mode"] == mode and runs[j]["n"] == runs[i]["n"]:
            return runs[j]
        j += step
    return None


def bracket_table(runs: list[dict[str, Any]]) -> str:
    """Each controller run's start against the watched runs just before and after it
    (same N), and against the mean of the two: a limit measured on both sides of ours
    cancels a drift of the host's speed between them to first order (`--mode watched
    controller watched`), where one run beside ours carries all of it. The peer column
    is the nearest Shipwright run after ours (before, when none follows)."""
    rows = ["| ours /s | watched before /s | watched after /s | ours / before | ours / after "
            "| **ours / mean of both** | Shipwright's /s | ours / Shipwright's |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def rate(x: dict[str, Any] | None) -> float | None:
        return None if x is None else float(x["start"]["throughput"])

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f}"

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or not b else f"{a / b:.2f}"

    for i, r in enumerate(runs):
        if r["mode"] != "controller":
            continue
        ours = rate(r)
        before = rate(_neighbour(runs, i, "watched", -1))
        after = rate(_neighbour(runs, i, "watched", 1))
        peer_rate = rate(_neighbour(runs, i, "peer", 1) or _neighbour(runs, i, "peer", -1))
        limits = [x for x in (before, after) if x is not None]
        mean = sum(limits) / len(limits) if limits else None
        rows.append(f"| {cell(ours)} | {cell(before)} | {cell(after)} | {ratio(ours, before)} "
                    f"| {ratio(ours, after)} | **{ratio(ours, mean)}** | {cell(peer_rate)} "
                    f"| {ratio(ours, peer_rate)} |")
    return "\n".join(rows)


async def main_async(args: argparse.Namespace) -> None:
    info = machine()
    runs = []
    for _ in range(args.repeat):
        for n in args.n:
            for mode in args.mode:
                workers_list = {"controller": args.workers,
                                "peer": args.peer_workers or args.workers}.get(
                                    mode, args.workers if args.writes == "on-event" else [0])
                for workers in workers_list:
                    with tempfile.TemporaryDirectory(prefix="e2e-tput-") as tmp:
                        runs.append(await one_run(mode, n, workers, args, Path(tmp)))
                    print(table(runs[-1:]).splitlines()[-1], flush=True)
    tables = [table(runs), phase_table(runs)]
    if any(r["mode"] == "controller" for r in runs) and any(r["mode"] == "watched" for r in runs):
        tables.append(bracket_table(runs))
    report("throughput", info, runs, *tables)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", nargs="+", default=["controller"],
                   choices=["controller", "bare", "mirror", "watched", "peer"])
    p.add_argument("--n", type=int, nargs="+", default=[1000])
    p.add_argument("--workers", type=int, nargs="+", default=[16],
                   help="--max-concurrent-reconciles for the controller")
    p.add_argument("--peer-workers", type=int, nargs="+",
                   help="BUILDRUN_MAX_CONCURRENT_RECONCILES for Shipwright's controller "
                   "(--mode peer); default: --workers")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the whole list this many times, the modes alternating per N")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    p.add_argument("--crds", choices=["own", "shipwright"], default="own",
                   help="own: each mode on the CRDs it ships with (peer on Shipwright's, "
                   "the others on ours); shipwright: every mode on Shipwright's, so the "
                   "API server's validation work is the same for both controllers")
    p.add_argument("--client", choices=["raw", "k8s"], default="raw")
    p.add_argument("--writes", choices=["chained", "on-event"], default="chained",
                   help="watched (bare, mirror: chained only): each BuildRun's create and "
                   "the controller's writes for it in one chain from this process, "
                   "--concurrency chains at a time (chained); or the creates alone, as in "
                   "a controller run, and the watchers' process sending each BuildRun's "
                   "writes when its informer delivers it, --workers at a time (on-event: a "
                   "controller with no logic; the start phase only)")
    p.add_argument("--no-finish", action="store_true", help="skip the finish phase")
    p.add_argument("--py-spy", nargs="*", choices=["start", "finish"],
                   help="py-spy record the controller during these phases (alone: the "
                   "start phase; collapsed stacks to bench/results/)")
    p.add_argument("--timeout", type=float, default=1200, help="bound on each run, seconds")
    p.add_argument("--quiet-wait", type=float, default=300, metavar="SECONDS",
                   help="wait at most this long before each run for a quiet machine (0: "
                   "measure 2 s and go on; for smoke runs on a busy machine)")
    p.add_argument("--apiserver-pprof", type=int, default=0, metavar="SECONDS",
                   help="CPU-profile kube-apiserver for this long from the start of a phase "
                   "(--profiling=true; Go pprof file to bench/results/)")
    p.add_argument("--apiserver-pprof-phases", nargs="+", choices=["start", "finish"],
                   default=["start"], help="the phases --apiserver-pprof profiles")
    p.add_argument("--controller-cwd", type=Path,
                   help="run the controller from this checkout (e.g. `git archive` of an "
                   "older commit) for a before/after comparison")
    p.add_argument("--controller-args", nargs=argparse.REMAINDER, default=[],
                   help="more flags for the controller (put last)")
    args = p.parse_args()
    if min(args.workers) < 1:
        p.error("--workers must be at least 1")
    if args.writes == "on-event" and (set(args.mode) & {"bare", "mirror"} or not args.no_finish):
        p.error("--writes on-event is for --mode watched's start phase: add --no-finish")
    args.py_spy = ["start"] if args.py_spy == [] else (args.py_spy or [])
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

"""A restart on a cluster full of finished BuildRuns: how soon a new BuildRun gets its
TaskRun, ours and Shipwright's controller side by side on the same objects.

    .venv/bin/python -m bench.e2e.restart --sizes 0 20000 50000 --mode controller peer
    .venv/bin/python -m bench.e2e.restart --sizes 0 5000 --foreign 5000 \\
        --mode before controller peer --before /tmp/before   # issue 32 part 10

One etcd + kube-apiserver (LocalCluster, loopback) with Shipwright's CRDs (conversion
None) and the TaskRun CRD at v1 and v1beta1 (bench.e2e.peer): both controllers run on
them, on the same objects. For each size, in order, the namespace is filled up to that
many finished BuildRuns, each with its finished TaskRun (bench.e2e.bodies.populate: the
controller's bodies, labels and statuses, the TaskRun as TektonStatusWriter finishes it),
and with --foreign N (once, before the first size) N finished TaskRuns that belong to no
BuildRun (the same body without Shipwright's labels and owner: another team's CI
pipelines on the same cluster). The Build is registered once (an untimed warm-up run of
our controller takes one BuildRun through, which then counts among the finished).

Then, for each size, --repeat times, each --mode in turn (back to back, the same
objects):

- the controller is started (spawn = t 0; Shipwright's Lease is deleted first, as an
  expired one would be: it always runs leader election, and a stopped leader does not
  release its Lease, so it would otherwise wait out the 15 s lease);
- at once, a new BuildRun `zz-new-...` is created (its name sorts after every listed
  one: in a FIFO queue it would be served last);
- recorded: /healthz and /readyz 200 (ours; Shipwright's serves /metrics and no probe),
  when the new BuildRun first shows status.taskRunName (a watch on that one name), and
  so its TaskRun's delay after /readyz (the benchmark's own watch of that one name);
  then, once the controller's reconcile count has
  not moved for 2 s, the reconciles it made since start (controller_runtime_reconcile_total
  of its BuildRun controller), its CPU seconds, RSS and peak RSS;
- it is stopped (SIGTERM), and the new BuildRun and its TaskRun deleted, so every
  restart sees the same objects.

--namespaces K spreads the finished BuildRuns over K namespaces (the bench's and K-1
more, each with its own strategy and Build), and --running M adds, once, M BuildRuns
whose TaskRuns run on (the controller's started status, the TaskRun unfinished), spread
the same way: a cluster in use, not one namespace of history (issue 42 part 4:
`--sizes 100000 --namespaces 100 --running 1000`). For each restart the API server's
RSS is sampled every 0.25 s from the spawn until the reconciles settle: its peak over
its RSS just before is what the controller's initial lists cost it.

Modes: controller (ours, this checkout or --controller-cwd), before (ours from --before
DIR, e.g. a `git archive` of an older commit), peer (Shipwright v0.20.13, `make
peer-build`). Raw figures go to bench/results/e2e-restart-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.e2e import peer
from bench.e2e.bodies import controller_taskrun, populate
from bench.e2e.common import (
    NS,
    Controller,
    Observer,
    apiserver_pprof,
    apiserver_requests,
    bounded,
    load_kube,
    log,
    machine,
    per_object,
    report,
    server_pids,
    start_py_spy,
    stop_py_spy,
    usage,
    wait_quiet,
)
from controller.runtime.errors import is_not_found
from controller.runtime.kube import JSON, LEASES, ApiError, Kube
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.fakes.tekton import TektonStatusWriter

SHIPWRIGHT_LEASE = ("default", "shipwright-build-controller-lock")


async def populate_foreign(kube: Kube, start: int, stop: int, concurrency: int,
                           deadline: float, build: JSON, strategy: JSON) -> None:
    """Finished TaskRuns of no BuildRun: the controller's TaskRun body without
    Shipwright's labels and owner reference, finished by the simulator."""
    sim = TektonStatusWriter(kube)
    owner = fixtures.buildrun("template")
    owner["metadata"].update(namespace=NS, uid="0")
    template = controller_taskrun(owner, build, strategy)

    async def one(name: str) -> None:
        body = orjson.loads(orjson.dumps(template))
        meta = body["metadata"]
        meta.pop("ownerReferences", None)
        meta["labels"] = {"app.kubernetes.io/managed-by": "ci", "pipeline": "nightly"}
        meta["name"] = name
        await kube.create(TASKRUNS, NS, body)
        await sim.finish(NS, name)

    await bounded([f"ci-{i:06d}" for i in range(start, stop)], one,
                  concurrency=concurrency, deadline=deadline)


async def delete_quietly(kube: Kube, resource: Any, namespace: str, name: str) -> None:
    try:
        await kube.delete(resource, namespace, name)
    except ApiError as exc:
        if not is_not_found(exc):
            raise


async def one_restart(cluster: LocalCluster, kube: Kube, mode: str, size: int, round_: int,
                      args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    quiet = await wait_quiet(max_wait=args.quiet_wait)
    out: dict[str, Any] = {"mode": mode, "size": size, "round": round_, "foreign": args.foreign,
                           "namespaces": args.namespaces, "running": args.running,
                           "quiet_before": quiet, "load_before": machine()["loadavg"]}
    deadline = time.monotonic() + args.timeout
    logfile = workdir / f"{mode}-{size}-{round_}.log"
    ctl: Controller
    if mode == "peer":
        await delete_quietly(kube, LEASES, *SHIPWRIGHT_LEASE)
        ctl = peer.ShipwrightController(cluster.kubeconfig, logfile, workers=args.workers,
                                        workdir=workdir)
    else:
        ctl = Controller(cluster.kubeconfig, logfile, workers=args.workers,
                         cwd=args.before if mode == "before" else args.controller_cwd,
                         extra=args.controller_args)
    name = f"zz-new-{mode}-{size}-{round_}"
    observer = Observer(cluster, field_selector=f"metadata.name={name}")  # that one only
    await observer.start(deadline)
    apiserver = server_pids(cluster)["apiserver"]
    requests = await apiserver_requests(cluster)
    apiserver_rss = [usage(apiserver).rss_kib]
    sampler = asyncio.create_task(sample_rss(apiserver, apiserver_rss))
    await ctl.start()
    out["spawn_unix"] = time.time()  # to place the controller's log lines ("ts")
    spy = (await start_py_spy(ctl.pid, f"restart-{mode}-{size}-{round_}", timeline=True)
           if args.py_spy and mode != "peer" else None)
    if spy is not None:
        out["py_spy_after_spawn_s"] = round(time.monotonic() - ctl.started, 3)
    try:
        await kube.create(BUILDRUNS, NS, fixtures.buildrun(name))
        out["created_after_spawn_s"] = round(time.monotonic() - ctl.started, 3)
        seen = asyncio.create_task(observer.wait("taskrun", [name], deadline))
        live, ready = await ctl.wait_ready(args.timeout)
        at_ready = ctl.usage()
        await seen
        taskrun_at = observer.taskrun_at[name]
        out["healthz_s"] = round(live, 3)
        out["ready_s"] = round(ready, 3)  # Shipwright's: /metrics serving
        out["taskrun_s"] = round(taskrun_at - ctl.started, 3)
        out["taskrun_after_ready_s"] = round(taskrun_at - ctl.started - ready, 3)
        out["cpu_at_ready_s"] = at_ready.cpu
        out["reconciles"] = await ctl.settled_reconciles(deadline)
        used = ctl.usage()
        out["settled_after_spawn_s"] = round(time.monotonic() - ctl.started, 3)
        out["cpu_s"], out["rss_kib"], out["hwm_kib"] = used.cpu, used.rss_kib, used.hwm_kib
        # How the controller listed: LIST requests (a page each) and watch-lists.
        out["lists"] = {k: v for k, v in per_object(
            requests, await apiserver_requests(cluster), 1).items()
            if k.startswith(("LIST ", "WATCHLIST "))}
    finally:
        sampler.cancel()
        out["apiserver_rss_before_kib"] = apiserver_rss[0]
        out["apiserver_rss_peak_kib"] = max(apiserver_rss)
        if spy is not None:
            out["py_spy"] = await stop_py_spy(spy)
        out["exit_code"] = await ctl.stop()
        await observer.stop()
    got = await kube.get(BUILDRUNS, NS, name)
    await delete_quietly(kube, BUILDRUNS, NS, name)
    if (got.get("status") or {}).get("taskRunName"):
        await delete_quietly(kube, TASKRUNS, NS, got["status"]["taskRunName"])
    out["load_after"] = machine()["loadavg"]
    return out


async def sample_rss(pid: int, into: list[int]) -> None:
    """Appends the RSS (KiB) of `pid` every 0.25 s until cancelled."""
    while True:
        await asyncio.sleep(0.25)
        into.append(usage(pid).rss_kib)


def namespace_of(i: int) -> str:
    """The i-th namespace of --namespaces: the bench's first."""
    return NS if i == 0 else f"{NS}-{i:03d}"


async def fill(kube: Kube, start: int, stop: int, args: argparse.Namespace, deadline: float,
               builds: list[tuple[JSON, JSON]], *, running: bool = False) -> float:
    """BuildRuns start..stop (finished, or with `running` running), in contiguous
    slices, one per namespace."""
    k = len(builds)
    chunk = -(-(stop - start) // k)
    seconds = 0.0
    for i, (strategy, build) in enumerate(builds):
        lo, hi = start + i * chunk, min(stop, start + (i + 1) * chunk)
        if lo < hi:
            seconds += await populate(kube, lo, hi, args.concurrency, deadline, build,
                                      strategy, True, namespace=namespace_of(i),
                                      running=running, prefix="run" if running else "br")
    return seconds


async def register_build(cluster: LocalCluster, kube: Kube, workdir: Path,
                         deadline: float) -> None:
    """Our controller once, untimed: validates the Build (both controllers' Build
    controllers then find it registered) and takes one BuildRun through."""
    ctl = Controller(cluster.kubeconfig, workdir / "register.log", workers=4)
    await ctl.start()
    try:
        await ctl.wait_ready(120)
        await kube.create(BUILDRUNS, NS, fixtures.buildrun("br-warmup"))
        while time.monotonic() < deadline:
            status = (await kube.get(BUILDRUNS, NS, "br-warmup")).get("status") or {}
            if status.get("taskRunName"):
                await TektonStatusWriter(kube).finish(NS, status["taskRunName"])
                break
            await asyncio.sleep(0.1)
        while time.monotonic() < deadline:
            if ((await kube.get(BUILDRUNS, NS, "br-warmup")).get("status") or {}).get(
                    "completionTime"):
                break
            await asyncio.sleep(0.1)
    finally:
        await ctl.stop()


def lists_text(lists: dict[str, float]) -> str:
    """"BuildRuns LIST / WATCHLIST, TaskRuns LIST / WATCHLIST" of one restart."""
    return ", ".join(f"{lists.get(f'LIST {r}', 0):.0f} / {lists.get(f'WATCHLIST {r}', 0):.0f}"
                     for r in ("buildruns", "taskruns"))


def table(runs: list[dict[str, Any]]) -> str:
    base = {r["mode"]: r for r in runs if r["size"] == 0 and r["round"] == 0}
    rows = ["| mode | finished BuildRuns (+ TaskRuns) | foreign TaskRuns | round | /readyz "
            "(Shipwright: serving) s | new BuildRun's TaskRun s | after /readyz s | "
            "reconciles at start | CPU s at ready / settled | RSS MiB | peak RSS MiB | "
            "KiB per finished BuildRun | API server RSS MiB before / peak | BuildRuns, "
            "TaskRuns listed in pages (LIST requests) / watch-lists | load 1m before "
            "| busy before |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|---:|---:|"]
    for r in runs:
        b = base.get(r["mode"])
        per = (f"{(r['rss_kib'] - b['rss_kib']) / r['size']:.2f}"
               if b is not None and r["size"] else "-")
        rows.append(
            f"| {r['mode']} | {r['size']:,} | {r['foreign']:,} | {r['round'] + 1} "
            f"| {r['ready_s']} | {r['taskrun_s']} | {r['taskrun_after_ready_s']} "
            f"| {sum(r['reconciles'].values()):,} | {r['cpu_at_ready_s']:.2f} / "
            f"{r['cpu_s']:.2f} | {r['rss_kib'] / 1024:.1f} | {r['hwm_kib'] / 1024:.1f} "
            f"| {per} | {r['apiserver_rss_before_kib'] / 1024:.0f} / "
            f"{r['apiserver_rss_peak_kib'] / 1024:.0f} | {lists_text(r.get('lists', {}))} "
            f"| {r['load_before'][0]} | {r['quiet_before']['busy_2s']} |")
    return "\n".join(rows)


async def main_async(args: argparse.Namespace) -> None:
    info = machine()
    deadline = time.monotonic() + args.timeout * 100
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="e2e-restart-") as tmp:
        workdir = Path(tmp)
        cluster = LocalCluster(workdir / "cluster", apiserver_args=(
            ["--profiling=true"] if args.apiserver_heap else []))
        try:
            await peer.start_cluster(cluster)
            kube = await load_kube(cluster)
            try:
                strategy, build = await fixtures.setup_namespace(kube, NS)
                await peer.add_service_account(kube)
                await register_build(cluster, kube, workdir, deadline)
                builds = [(strategy, build)] + [
                    await fixtures.setup_namespace(kube, namespace_of(i))
                    for i in range(1, args.namespaces)]
                if args.running:
                    log(f"populating {args.running} running BuildRuns with TaskRuns")
                    await fill(kube, 0, args.running, args, deadline, builds, running=True)
                if args.foreign:
                    log(f"populating {args.foreign} foreign TaskRuns")
                    await populate_foreign(kube, 0, args.foreign, args.concurrency, deadline,
                                           build, strategy)
                have = 0
                for size in sorted(args.sizes):
                    if size > have:
                        log(f"populating {have} -> {size} finished BuildRuns with TaskRuns")
                        secs = await fill(kube, have, size, args, deadline, builds)
                        log(f"  {size - have} in {secs:.1f} s")
                        have = size
                    heap = (await apiserver_pprof(cluster, f"restart-{size}")
                            if args.apiserver_heap else None)
                    for round_ in range(args.repeat):
                        for mode in args.mode:
                            run = await one_restart(cluster, kube, mode, size, round_, args,
                                                    workdir)
                            if heap:
                                run["apiserver_heap"] = heap
                            runs.append(run)
                            log(f"  {run}")
                            print(table([run]).splitlines()[-1], flush=True)
            finally:
                await kube.close()
        finally:
            cluster.stop()
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log_file in workdir.glob("*.log"):  # noqa: ASYNC240 - once, at the end
                shutil.copy(log_file, args.keep_logs / log_file.name)
    report("restart", info, runs, table(runs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[0, 20000, 50000])
    p.add_argument("--mode", nargs="+", default=["controller", "peer"],
                   choices=["controller", "before", "peer"])
    p.add_argument("--before", type=Path, help="checkout of ours for --mode before")
    p.add_argument("--controller-cwd", type=Path,
                   help="run --mode controller from this checkout (a `git archive` of the "
                   "commit measured, so the tree may change during a long run)")
    p.add_argument("--foreign", type=int, default=0,
                   help="finished TaskRuns of no BuildRun, made once before the first size")
    p.add_argument("--namespaces", type=int, default=1,
                   help="spread the finished (and running) BuildRuns over this many")
    p.add_argument("--running", type=int, default=0,
                   help="BuildRuns whose TaskRuns run on, made once before the sizes")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--apiserver-heap", action="store_true",
                   help="kube-apiserver with --profiling=true, and its heap profile saved "
                   "after each size's fill (bench/results/; `go tool pprof -top "
                   "-sample_index=inuse_space <file>`): what holds its memory")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (fill)")
    p.add_argument("--quiet-wait", type=float, default=60, metavar="SECONDS")
    p.add_argument("--timeout", type=float, default=600, help="bound on each restart")
    p.add_argument("--keep-logs", type=Path, help="copy the controllers' logs here")
    p.add_argument("--py-spy", action="store_true",
                   help="py-spy record ours from spawn to settled, every sample in order "
                   "(speedscope JSON to bench/results/; py_spy_after_spawn_s says when it began)")
    p.add_argument("--controller-args", nargs=argparse.REMAINDER, default=[],
                   help="more flags for ours (controller, before), e.g. --log-level debug "
                   "(put last)")
    args = p.parse_args()
    if "before" in args.mode and args.before is None:
        p.error("--mode before needs --before DIR")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

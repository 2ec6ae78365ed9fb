"""One informer's list of N BuildRuns, each way it may be asked for, and what each costs
us and kube-apiserver (issue 42 part 4: what grows faster than linearly at 100,000).

    .venv/bin/python -m bench.e2e.lists --sizes 10000 40000 --repeat 4

One etcd + kube-apiserver (LocalCluster, loopback, --profiling=true) with Shipwright's
CRDs; for each size, in order, the cluster is filled up to that many finished BuildRuns
(bench.e2e.bodies.populate: the controller's bodies and statuses, no TaskRuns). Then,
--repeat rounds, each way in turn (the order rotated by one each round), one list of
every BuildRun of the cluster, in a process of its own (`--one`), so its peak RSS is
its own:

pages-P     our Informer (controller.runtime.informers) with stream_lists off: pages of
            P (`limit`, then each `continue`), from the watch cache; until synced.
watch-list  our Informer as it runs: a watch-list (sendInitialEvents, KEP 3157), the
            objects as ADDED events then the end bookmark; until synced.
rv0         one GET with resourceVersion=0, which the watch cache answers whole (the
            limit ignored): client-go's list before its watch-lists. Decoded only, not
            stored: a floor for an informer that lists this way.

Reported per list: wall seconds, our CPU seconds and peak RSS; kube-apiserver's CPU
seconds (utime+stime) and bytes allocated (go_memstats_alloc_bytes_total), with a
garbage collection forced just before (/debug/pprof/heap?gc=1) so that none falls in
the measurement on a heap this size (GOGC=100: the next comes after as many bytes again
as are live), and the objects its watch cache scanned for the list
(apiserver_cache_list_fetched_objects_total of buildruns: a page scans every object
after its continue key). Raw figures go to bench/results/e2e-lists-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from bench.e2e import peer
from bench.e2e.bodies import populate
from bench.e2e.common import (
    NS,
    apiserver_get,
    load_kube,
    log,
    machine,
    report,
    server_pids,
    usage,
)
from controller.runtime.informers import Informer
from controller.runtime.kube import Kube, load_api_client
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.hack import REPO

WAYS = ("pages-500", "pages-2000", "watch-list", "rv0")


async def list_once(kubeconfig: str, way: str) -> dict[str, Any]:
    """`--one`: lists every BuildRun `way`, in this process; its figures."""
    kube = Kube(await load_api_client(kubeconfig))
    t0, cpu0 = time.monotonic(), time.process_time()
    try:
        if way == "rv0":
            items = len((await kube.list(BUILDRUNS, None, limit=500,
                                         resourceVersion="0"))["items"])
        else:
            paged = way.startswith("pages-")
            informer = Informer(kube, BUILDRUNS, None, stream_lists=not paged,
                                page_size=int(way.split("-")[1]) if paged else 500)
            task = asyncio.create_task(informer.run())
            try:
                await informer.wait_synced()
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            items = len(informer.store)
    finally:
        await kube.close()
    return {"items": items, "wall_s": round(time.monotonic() - t0, 3),
            "cpu_s": round(time.process_time() - cpu0, 3),
            "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


async def apiserver_counters(cluster: LocalCluster) -> dict[str, float]:
    """kube-apiserver's bytes allocated so far, its GC cycles, and the BuildRuns its
    watch cache has scanned for lists."""
    out = {"alloc_bytes": 0.0, "gc_cycles": 0.0, "cache_fetched": 0.0}
    text = (await apiserver_get(cluster, "/metrics")).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "go_memstats_alloc_bytes_total":
                out["alloc_bytes"] = s.value
            elif s.name == "go_gc_duration_seconds_count":
                out["gc_cycles"] = s.value
            elif (s.name == "apiserver_cache_list_fetched_objects_total"
                  and s.labels.get("resource") == "buildruns"):
                out["cache_fetched"] += s.value
    return out


async def one_list(cluster: LocalCluster, way: str, size: int, round_: int) -> dict[str, Any]:
    # No GC left to fall in ours (a forced one on a heap of GiBs takes seconds).
    await apiserver_get(cluster, "/debug/pprof/heap?gc=1", timeout=120)
    apiserver = server_pids(cluster)["apiserver"]
    before, counters = usage(apiserver), await apiserver_counters(cluster)
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "bench.e2e.lists", "--one", way,
                         "--kubeconfig", str(cluster.kubeconfig)],
        cwd=REPO, capture_output=True, text=True, check=True)
    after, counters_after = usage(apiserver), await apiserver_counters(cluster)
    out: dict[str, Any] = {"way": way, "size": size, "round": round_,
                           **orjson.loads(done.stdout.splitlines()[-1])}
    out["apiserver_cpu_s"] = round(after.cpu - before.cpu, 2)
    out["apiserver_rss_kib"] = [before.rss_kib, after.rss_kib]
    for name, value in counters_after.items():
        out[f"apiserver_{name}"] = value - counters[name]
    return out


def table(runs: list[dict[str, Any]]) -> str:
    rows = ["| BuildRuns | way | round | wall s | our CPU s | our peak RSS MiB | API server "
            "CPU s | API server MiB allocated | GC cycles in it | objects the cache "
            "scanned |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        rows.append(
            f"| {r['size']:,} | {r['way']} | {r['round'] + 1} | {r['wall_s']:.2f} "
            f"| {r['cpu_s']:.2f} | {r['peak_rss_kib'] / 1024:.0f} | {r['apiserver_cpu_s']:.2f} "
            f"| {r['apiserver_alloc_bytes'] / 2**20:,.0f} | {r['apiserver_gc_cycles']:.0f} "
            f"| {r['apiserver_cache_fetched']:,.0f} |")
    return "\n".join(rows)


async def main_async(args: argparse.Namespace) -> None:
    info = machine()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="e2e-lists-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", apiserver_args=["--profiling=true"])
        try:
            await peer.start_cluster(cluster)
            kube = await load_kube(cluster)
            try:
                strategy, build = await fixtures.setup_namespace(kube, NS)
                have = 0
                for size in sorted(args.sizes):
                    log(f"populating {have} -> {size} finished BuildRuns")
                    await populate(kube, have, size, args.concurrency,
                                   time.monotonic() + 3600, build, strategy, False)
                    have = size
                    ways = list(args.ways)
                    for round_ in range(args.repeat):
                        for way in ways:
                            run = await one_list(cluster, way, size, round_)
                            runs.append(run)
                            print(table([run]).splitlines()[-1], flush=True)
                        ways = ways[1:] + ways[:1]
            finally:
                await kube.close()
        finally:
            cluster.stop()
    report("lists", info, runs, table(runs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10000, 40000])
    p.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (fill)")
    p.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)
    p.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(orjson.dumps(asyncio.run(list_once(args.kubeconfig, args.one))).decode())
        return
    asyncio.run(main_async(args))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

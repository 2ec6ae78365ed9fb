"""Controller memory and CPU with many cached BuildRuns, and startup time.

    .venv/bin/python -m bench.e2e.memory --sizes 0 1000 10000 50000

One etcd + kube-apiserver (LocalCluster, loopback). For each size, in order, the
namespace is filled up to that many *finished* BuildRuns, made directly by this
process in the shape the controller leaves them (bodies from the controller's own
functions, via bench.e2e.bodies): create; the controller's label PATCH (the
Build's name and generation labels); one status patch with what the controller has
written by the end: every field Shipwright's status carries for a successful build of
a git source (startTime, taskRunName, executor, buildSpec, the Succeeded condition,
completionTime, output digest and size, source commit, author, branch and timestamp),
read from its TaskRun's results (TektonSimulator's digest and SOURCE_RESULTS). With
--taskruns each also gets its TaskRun (generate_taskrun's body, about 4.3 KB of JSON)
finished as TektonSimulator finishes it, with those results, as a cluster keeps a
finished BuildRun's TaskRun: the controller caches both. The
controller has nothing to do but cache them. Then `python -m controller` starts as a
subprocess and the script records:

- startup: seconds from spawn to /healthz 200 (imported, serving) and to /readyz 200
  (every informer listed: caches synced);
- reconciles: controller_runtime_reconcile_total once it has not moved for 2 s after
  readyz (a finished BuildRun that needs nothing costs no reconcile since issue 34; an
  older checkout, --controller-cwd, reconciles each once, without an API call), and
  the CPU seconds (utime+stime) from readyz to then: CPU per reconcile;
- CPU at readyz (start-up: imports, list, decode, cache) and in total;
- RSS (VmRSS) after a 3 s settle, and peak RSS (VmHWM), per process; per cached
  BuildRun beyond the 0-object baseline.

The controller is stopped (SIGTERM) before the next size. --analyze N then decodes the
first N BuildRuns (and TaskRuns, if any) as the informers do (orjson, strip_noise,
Store.upsert with the 'build' index and the informer's freeze rule, a finished BuildRun
kept packed (store.Packer); for TaskRuns the informer's transform, buildrun.executors:
TASKRUN.slim, and its freeze rule) in this process under tracemalloc, and reports bytes
per object as stored, and for comparison as decoded dicts (before the freeze rule),
BuildRuns also without strip_noise's string interning and TaskRuns whole (no transform).
Raw figures go to bench/results/e2e-memory-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.e2e.bodies import populate
from bench.e2e.common import (
    NS,
    Controller,
    command_line,
    load_kube,
    log,
    machine,
    wait_quiet,
    write_results,
)
from bench.e2e.peer import add_service_account
from controller.buildrun.caches import EXECUTOR_INDEXERS, finished_buildrun
from controller.buildrun.executors import TASKRUN
from controller.buildrun.status import run_finished
from controller.runtime.informers import strip_noise
from controller.runtime.kube import JSON, Kube, Resource
from controller.runtime.store import Freeze, Indexer, Store
from controller.shipwright.indexes import BUILDRUN_INDEXERS
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster


async def measure(cluster: LocalCluster, size: int, args: argparse.Namespace,
                  workdir: Path) -> dict[str, Any]:
    quiet = await wait_quiet(max_wait=args.quiet_wait)
    ctl = Controller(cluster.kubeconfig, workdir / f"controller-{size}.log",
                     workers=args.workers, cwd=args.controller_cwd)
    await ctl.start()
    try:
        live, ready = await ctl.wait_ready(args.timeout)
        at_ready = ctl.usage()
        t_ready = time.monotonic()
        # Builds and strategies are not reconciled, nor a finished BuildRun that needs
        # nothing (issue 34): the start's work is done when the count stops moving.
        counts = await ctl.settled_reconciles(time.monotonic() + args.timeout)
        t_done = time.monotonic()
        after = ctl.usage()
        await asyncio.sleep(3.0)
        settled = ctl.usage()
        counts = await ctl.reconciles()
        reconciles = sum(counts.values())
        out = {
            "size": size,
            "quiet_before": quiet,
            "startup_healthz_s": round(live, 3),
            "startup_readyz_s": round(ready, 3),
            "reconciles": counts,
            "reconcile_seconds": round(t_done - t_ready, 3),
            "cpu_at_ready_s": at_ready.cpu,
            "cpu_ready_to_reconciled_s": round(after.cpu - at_ready.cpu, 3),
            "cpu_per_reconcile_ms": (round(1000 * (after.cpu - at_ready.cpu) / reconciles, 4)
                                     if reconciles else None),
            "cpu_total_s": settled.cpu,
            "rss_kib": settled.rss_kib,
            "hwm_kib": settled.hwm_kib,
            "rss_at_ready_kib": at_ready.rss_kib,
        }
    finally:
        out_code = await ctl.stop()
    out["exit_code"] = out_code
    return out


# -- in-process: where the bytes of a cached BuildRun go --------------------------------

def _walk_strings(obj: Any, counts: Counter[str]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            counts[k] += 1
            _walk_strings(v, counts)
    elif isinstance(obj, list):
        for v in obj:
            _walk_strings(v, counts)
    elif isinstance(obj, str):
        counts[obj] += 1


def _deep_size(obj: Any, seen: set[int]) -> tuple[int, int]:
    """(bytes of containers, bytes of str/int/other leaves), each object counted once."""
    if id(obj) in seen:
        return 0, 0
    seen.add(id(obj))
    if isinstance(obj, dict):
        c, leaf = sys.getsizeof(obj), 0
        for k, v in obj.items():
            for part in (k, v):
                pc, pl = _deep_size(part, seen)
                c, leaf = c + pc, leaf + pl
        return c, leaf
    if isinstance(obj, list):
        c, leaf = sys.getsizeof(obj), 0
        for v in obj:
            pc, pl = _deep_size(v, seen)
            c, leaf = c + pc, leaf + pl
        return c, leaf
    return 0, sys.getsizeof(obj)


def _strip_only(obj: JSON) -> JSON:
    """strip_noise without its string interning: what the informer stored before 762a20d."""
    return strip_noise(obj, frozen=True)


def _same(obj: JSON) -> JSON:
    return obj


def _store_bytes(raw_items: list[bytes], resource: Resource, indexers: dict[str, Indexer],
                 prepare: Callable[[JSON], JSON], freeze: Freeze | None = None, *,
                 intern: bool = True) -> float:
    """tracemalloc bytes per object for decode + prepare + Store.upsert (as informers do:
    with a freeze rule, a frozen object's strings are not interned)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = Store(indexers, freeze)
    for raw in raw_items:
        obj = orjson.loads(raw)
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        store.upsert(strip_noise(prepare(obj), frozen=not intern or store.freezes(obj)))
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del store
    return used / len(raw_items)


async def _listed(kube: Kube, resource: Resource, n: int) -> list[bytes]:
    """The first n objects of `resource` in NS, each list item as JSON bytes."""
    raw_items: list[bytes] = []
    cont = None
    while len(raw_items) < n:
        query: dict[str, str | int] = {"limit": 500}
        if cont:
            query["continue"] = cont
        page = await kube.list(resource, NS, **query)
        raw_items += [orjson.dumps(item) for item in page["items"]]
        cont = page["metadata"].get("continue")
        if not cont:
            break
    return raw_items[:n]


async def analyze(kube: Kube, n: int) -> dict[str, Any]:
    """Lists n BuildRuns (and their TaskRuns, if any) as raw list items and measures
    their cost in a Store, prepared as the controller's informers prepare them."""
    raw_items = await _listed(kube, BUILDRUNS, n)
    sample = _strip_only(orjson.loads(raw_items[0]))
    strings: Counter[str] = Counter()
    for raw in raw_items[:1000]:
        _walk_strings(_strip_only(orjson.loads(raw)), strings)
    containers, leaves = _deep_size(sample, set())
    by_build: dict[str, Indexer] = BUILDRUN_INDEXERS

    result = {
        "objects": len(raw_items),
        "json_bytes_per_object_as_listed": round(sum(map(len, raw_items)) / len(raw_items)),
        "sample_stored_object": sample,
        "sample_getsizeof_containers": containers,
        "sample_getsizeof_leaves": leaves,
        "tracemalloc_bytes_per_object": {
            "as_informer_stores": round(_store_bytes(raw_items, BUILDRUNS, by_build, _same,
                                                     finished_buildrun)),
            "as_dicts": round(_store_bytes(raw_items, BUILDRUNS, by_build, _same)),
            "as_dicts_without_interning": round(_store_bytes(raw_items, BUILDRUNS, by_build,
                                                             _same, intern=False)),
        },
        "repeated_values_top": [(s[:60], c) for s, c in strings.most_common(25)],
    }
    raw_taskruns = await _listed(kube, TASKRUNS, n)
    if raw_taskruns:
        result["taskruns"] = {
            "objects": len(raw_taskruns),
            "json_bytes_per_object_as_listed": round(
                sum(map(len, raw_taskruns)) / len(raw_taskruns)),
            "tracemalloc_bytes_per_object": {
                "as_informer_stores": round(_store_bytes(
                    raw_taskruns, TASKRUNS, EXECUTOR_INDEXERS, TASKRUN.slim, run_finished)),
                "slim_as_dicts": round(_store_bytes(raw_taskruns, TASKRUNS, EXECUTOR_INDEXERS,
                                                    TASKRUN.slim)),
                "whole_as_dicts": round(_store_bytes(raw_taskruns, TASKRUNS,
                                                     EXECUTOR_INDEXERS, _same)),
            },
        }
    return result


async def main_async(args: argparse.Namespace) -> None:
    info = machine()
    deadline = time.monotonic() + args.timeout
    runs: list[dict[str, Any]] = []
    analysis = None
    with tempfile.TemporaryDirectory(prefix="e2e-mem-") as tmp:
        workdir = Path(tmp)
        async with LocalCluster(workdir / "cluster") as cluster:
            kube = await load_kube(cluster)
            try:
                strategy, build = await fixtures.setup_namespace(kube, NS)
                await add_service_account(kube)  # the controller runs TaskRuns as `default`
                have = 0
                for size in sorted(args.sizes):
                    if size > have:
                        log(f"populating {have} -> {size} finished BuildRuns")
                        secs = await populate(kube, have, size, args.concurrency, deadline,
                                              build, strategy, args.taskruns)
                        log(f"  {size - have} in {secs:.1f} s ({(size - have) / secs:.0f}/s)")
                        have = size
                    if args.analyze and have >= args.analyze and analysis is None:
                        analysis = await analyze(kube, args.analyze)
                        log(f"analysis: {analysis['tracemalloc_bytes_per_object']}")
                    log(f"controller with {size} cached BuildRuns")
                    run = await measure(cluster, size, args, workdir)
                    runs.append(run)
                    log(f"  {run}")
            finally:
                await kube.close()
    base = next((r for r in runs if r["size"] == 0), None)
    for r in runs:
        if base is not None and r["size"]:
            r["rss_per_object_kib"] = round((r["rss_kib"] - base["rss_kib"]) / r["size"], 3)
            r["hwm_per_object_kib"] = round((r["hwm_kib"] - base["hwm_kib"]) / r["size"], 3)
            r["startup_cpu_per_object_ms"] = round(
                1000 * (r["cpu_at_ready_s"] - base["cpu_at_ready_s"]) / r["size"], 4)
    print(f"machine: {info}")
    print(f"command: {command_line()}")
    print("| cached BuildRuns | /healthz s | /readyz s | reconciles | CPU ms/reconcile | "
          "start-up CPU s | RSS MiB | peak RSS MiB | RSS KiB/object | peak KiB/object | "
          "busy before | load 1m before |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['size']:,} | {r['startup_healthz_s']} | {r['startup_readyz_s']} "
              f"| {sum(r['reconciles'].values()):,} | {r['cpu_per_reconcile_ms']} "
              f"| {r['cpu_at_ready_s']} | {r['rss_kib'] / 1024:.1f} | {r['hwm_kib'] / 1024:.1f} "
              f"| {r.get('rss_per_object_kib', '-')} | {r.get('hwm_per_object_kib', '-')} "
              f"| {r['quiet_before']['busy_2s']} | {r['quiet_before']['loadavg'][0]} |")
    for what in ([analysis, analysis.get("taskruns")] if analysis else []):
        if what:
            print(f"in-process analysis of {what['objects']} objects: "
                  f"{what['tracemalloc_bytes_per_object']} bytes/object; listed JSON "
                  f"{what['json_bytes_per_object_as_listed']} bytes/object")
    path = write_results("memory", {"machine": info, "command": command_line(), "runs": runs,
                                    "analysis": analysis, "end_load": machine()["loadavg"]})
    print(f"raw: {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[0, 1000, 10000, 50000])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (fill)")
    p.add_argument("--taskruns", action="store_true",
                   help="give each finished BuildRun its finished TaskRun (the controller's "
                   "body), as a cluster keeps them: the controller caches both")
    p.add_argument("--analyze", type=int, default=10000,
                   help="in-process tracemalloc of this many objects (0: skip)")
    p.add_argument("--timeout", type=float, default=3600, help="bound on the whole run")
    p.add_argument("--quiet-wait", type=float, default=300, metavar="SECONDS",
                   help="wait at most this long before each size for a quiet machine")
    p.add_argument("--controller-cwd", type=Path,
                   help="run the controller from this checkout, for before/after")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

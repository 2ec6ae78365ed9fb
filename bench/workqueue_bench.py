"""Throughput of the asyncio workqueue next to client-go's, measured in one run.

    .venv/bin/python bench/workqueue_bench.py [--repeats 5] [--ops 200000] [--no-go]

Cases (the Go program in bench/workqueue_go does the same work):
- cycle: add N distinct keys, W workers get+done them all, repeated to --ops cycles.
- handoff: one key at a time to one blocked worker, waiting for its done: the cost
  of waking a worker, which cycle (workers never block) does not show.
- add_after: 100k distinct keys with delays of 1-1000 us, 8 workers: the rate of the
  add_after calls, and of the whole trip until every key is done.
Both sides run each case on an unnamed queue (no metrics) and on a named one
(Prometheus metrics on; for Go, component-base's provider). The median of --repeats runs is
reported. Results go to bench/results/workqueue-<time>.json and a table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from workqueue import DelayingQueue, Queue, ShutDown

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
GO_DIR = BENCH / "workqueue_go"


def keys(n: int) -> list[str]:
    return [f"default/buildrun-{i}" for i in range(n)]


async def _workers(
    q: Queue[str], count: int, on_done: Callable[[], None]
) -> list[asyncio.Task[None]]:
    async def work() -> None:
        get, done = q.get, q.done
        while True:
            try:
                item = await get()
            except ShutDown:
                return
            done(item)
            on_done()

    tasks = [asyncio.create_task(work()) for _ in range(count)]
    await asyncio.sleep(0)  # let them block in get()
    return tasks


async def cycles(ks: list[str], workers: int, rounds: int, name: str) -> float:
    q = Queue[str](name=name)
    loop = asyncio.get_running_loop()
    left = 0
    round_done = loop.create_future()

    def on_done() -> None:
        nonlocal left
        left -= 1
        if not left:
            round_done.set_result(None)

    tasks = await _workers(q, workers, on_done)
    add = q.add
    start = time.perf_counter()
    for _ in range(rounds):
        left = len(ks)
        round_done = loop.create_future()
        for k in ks:
            add(k)
        await round_done
    elapsed = time.perf_counter() - start
    q.shutdown()
    await asyncio.gather(*tasks)
    return elapsed


async def handoff(ks: list[str], name: str) -> float:
    q = Queue[str](name=name)
    loop = asyncio.get_running_loop()
    processed = loop.create_future()

    def on_done() -> None:
        processed.set_result(None)

    tasks = await _workers(q, 1, on_done)
    start = time.perf_counter()
    for k in ks:
        processed = loop.create_future()
        q.add(k)
        await processed
    elapsed = time.perf_counter() - start
    q.shutdown()
    await asyncio.gather(*tasks)
    return elapsed


async def add_after(ks: list[str], workers: int, name: str) -> tuple[float, float]:
    q = DelayingQueue[str](name=name)
    loop = asyncio.get_running_loop()
    left = len(ks)
    all_done = loop.create_future()

    def on_done() -> None:
        nonlocal left
        left -= 1
        if not left:
            all_done.set_result(None)

    tasks = await _workers(q, workers, on_done)
    start = time.perf_counter()
    for i, k in enumerate(ks):
        q.add_after(k, (1 + i % 1000) * 1e-6)
    calls = time.perf_counter() - start
    await all_done
    total = time.perf_counter() - start
    q.shutdown()
    await asyncio.gather(*tasks)
    return calls, total


def median_time(repeats: int, run: Callable[..., Coroutine[Any, Any, float]], *args: Any) -> float:
    """Median seconds of ``run(*args)``, each run on a fresh event loop."""
    return statistics.median(asyncio.run(run(*args)) for _ in range(repeats))


def python_results(repeats: int, ops: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def emit(case: str, workers: int, n: int, done: int, seconds: float, metrics: bool) -> None:
        out.append(
            {
                "impl": "python",
                "case": case,
                "workers": workers,
                "keys": n,
                "ops": done,
                "ops_per_sec": done / seconds,
                "repeats": repeats,
                "metrics": metrics,
            }
        )

    for metrics, name in ((False, ""), (True, "bench")):
        for n in (1000, 100_000):
            ks = keys(n)
            rounds = max(1, ops // n)
            for workers in (1, 8):
                seconds = median_time(repeats, cycles, ks, workers, rounds, name)
                emit("cycle", workers, n, rounds * n, seconds, metrics)
        ks = keys(ops // 10)
        seconds = median_time(repeats, handoff, ks, name)
        emit("handoff", 1, len(ks), len(ks), seconds, metrics)
        ks = keys(100_000)
        trips = [asyncio.run(add_after(ks, 8, name)) for _ in range(repeats)]
        calls = statistics.median(c for c, _ in trips)
        total = statistics.median(t for _, t in trips)
        emit("add_after_calls", 8, len(ks), len(ks), calls, metrics)
        emit("add_after_total", 8, len(ks), len(ks), total, metrics)
    return out


def go_results(repeats: int, ops: int) -> list[dict[str, Any]]:
    binary = RESULTS / "workqueue_go"
    env = {**os.environ, "GOTOOLCHAIN": "local"}
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=GO_DIR, env=env, check=True)
    out = []
    for procs in ("1", "2"):
        run = subprocess.run(
            [str(binary), "-repeats", str(repeats), "-ops", str(ops)],
            env={**env, "GOMAXPROCS": procs},
            check=True,
            capture_output=True,
            text=True,
        )
        out += [json.loads(line) for line in run.stdout.splitlines()]
    return out


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def table(results: list[dict[str, Any]]) -> str:
    def key(r: dict[str, Any]) -> tuple[str, int, int, bool]:
        return (r["case"], r["keys"], r["workers"], r["metrics"])

    py = {key(r): r["ops_per_sec"] for r in results if r["impl"] == "python"}
    go1 = {key(r): r["ops_per_sec"] for r in results if r.get("gomaxprocs") == 1}
    go2 = {key(r): r["ops_per_sec"] for r in results if r.get("gomaxprocs") == 2}

    def cell(rates: dict[tuple[str, int, int, bool], float], k: tuple[str, int, int, bool]) -> str:
        return f"{rates[k]:,.0f}" if k in rates else "-"

    def ratio(k: tuple[str, int, int, bool]) -> str:
        return f"{go1[k] / py[k]:.1f}x" if k in go1 else "-"

    rows = [
        "| case | keys | workers | metrics | Python ops/s | Go 1 core ops/s | Go 2 cores ops/s "
        "| Go (1 core) / Python |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for k in sorted(py, key=lambda k: k[3]):  # stable: metrics off first, run order kept
        rows.append(
            f"| {k[0]} | {k[1]:,} | {k[2]} | {'on' if k[3] else 'off'} | {cell(py, k)} "
            f"| {cell(go1, k)} | {cell(go2, k)} | {ratio(k)} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--no-go", action="store_true", help="skip the client-go side")
    args = parser.parse_args()

    load_before = os.getloadavg()
    results = python_results(args.repeats, args.ops)
    if not args.no_go:
        results += go_results(args.repeats, args.ops)
    host = machine()
    date = datetime.now(UTC).isoformat(timespec="seconds")
    load_after = os.getloadavg()
    report = {
        "date": date,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": host,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "results": results,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"workqueue-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{date}  {host['cpu']}  nproc={host['nproc']}  python {host['python']}")
    print(f"load average before {load_before}, after {load_after}")
    print(table(results))
    print(f"written to {path.relative_to(BENCH.parent)}")


if __name__ == "__main__":
    main()

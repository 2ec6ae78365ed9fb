"""Backoff under load: measured delays between retries against the configured schedule.

    .venv/bin/python -m bench.e2e.backoff --n 2000 --error 0.2 --seed 1 --base-delay 0.1

A real validating admission webhook for TaskRuns (devtools.fakes.webhook's
FlakyWebhook, subclassed here to log each call's time and the TaskRun's name from
the AdmissionReview) answers 500 to a seeded-random --error share of TaskRun creates.
kube-apiserver turns that into a 500 "failed calling webhook" for the controller, a
system error: the BuildRun goes back to the queue with the per-item exponential
backoff, base --base-delay, doubling per failure (client-go's
ItemExponentialFailureRateLimiter: the k-th retry of an object waits base * 2**(k-1)).
The overall token bucket is raised out of the way (--rate-limit-qps/burst 100000),
jitter is off. N BuildRuns are created at once (--concurrency in flight) so the
controller is loaded while it retries.

For each TaskRun name, consecutive webhook calls give the measured delay of each
retry; the expected delay is the schedule's. Reported per retry number: count,
expected, measured median and p90, and the excess (measured - expected) median, p90
and minimum (a negative excess would be a retry earlier than the schedule allows).
The controller's workqueue histograms (queue wait and reconcile time of every key, from
its /metrics) are printed too. The excess splits, by the controller's own log line for
each failed reconcile (JSON,
with its time and key), into 'back': webhook answered -> controller logged the
failure (the API server passing the 500 back), and 'ahead': logged -> the next
webhook call, minus the expected delay (queue wait once due, the two GETs before the
create, and the create reaching the webhook).

Raw figures go to bench/results/e2e-backoff-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from bench.e2e.common import (
    NS,
    Controller,
    Observer,
    bounded,
    command_line,
    load_kube,
    log,
    machine,
    percentile,
    wait_quiet,
    write_results,
)
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.fakes.webhook import FlakyWebhook, Verdict


class LoggingWebhook(FlakyWebhook):
    """FlakyWebhook that records (time.time(), TaskRun name, verdict) for every call."""

    def __init__(self, cluster: LocalCluster, namespace: str, error: float, seed: int) -> None:
        rng = random.Random(seed)
        super().__init__(cluster, namespace,
                         lambda _: "error" if rng.random() < error else "allow")
        self.log: list[tuple[float, str, Verdict]] = []

    def verdict_for(self, request: dict[str, Any]) -> Verdict:
        now = time.time()
        name = request.get("name") or (
            (request.get("object") or {}).get("metadata") or {}).get("name", "?")
        verdict = super().verdict_for(request)
        self.log.append((now, name, verdict))
        return verdict


def controller_failures(path: Path) -> dict[str, list[float]]:
    """BuildRun name -> times the controller logged a failed reconcile of it."""
    out: dict[str, list[float]] = defaultdict(list)
    for raw in path.read_bytes().splitlines():
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("msg") == "reconciled" and (
                entry.get("result") == "error"):
            out[str(entry["key"]).rpartition("/")[2]].append(float(entry["ts"]))
    return out


def histogram_quantiles(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
                        family: str) -> dict[str, float]:
    """p50/p90 (bucket upper bounds, as histogram_quantile without interpolation) and the
    mean of a workqueue histogram of the buildrun queue, from one /metrics scrape."""
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                     if k[0] == f"{family}_bucket" and dict(k[1]).get("name") == "buildrun")
    count = next((v for k, v in samples.items()
                  if k[0] == f"{family}_count" and dict(k[1]).get("name") == "buildrun"), 0.0)
    total = next((v for k, v in samples.items()
                  if k[0] == f"{family}_sum" and dict(k[1]).get("name") == "buildrun"), 0.0)
    out: dict[str, float] = {"count": count, "mean": round(total / count, 4) if count else 0.0}
    for q in (0.5, 0.9, 0.99):
        out[f"p{int(q * 100)}_le"] = next((le for le, v in buckets if v >= q * count), 0.0)
    return out


def stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"median": round(percentile(values, 50), 4), "p90": round(percentile(values, 90), 4),
            "min": round(min(values), 4), "max": round(max(values), 4)}


def analyse(calls: list[tuple[float, str, Verdict]], failures: dict[str, list[float]],
            taskrun_of: dict[str, str], base: float, cap: float) -> dict[int, dict[str, Any]]:
    by_taskrun: dict[str, list[tuple[float, Verdict]]] = defaultdict(list)
    for t, name, verdict in calls:
        by_taskrun[name].append((t, verdict))
    buildrun_of = {tr: br for br, tr in taskrun_of.items()}
    rows: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for tr, seq in by_taskrun.items():
        seq.sort()
        logged = failures.get(buildrun_of.get(tr, ""), [])
        for k in range(1, len(seq)):
            t_prev, v_prev = seq[k - 1]
            if v_prev != "error":
                rows[k]["not_after_error"].append(1.0)  # a call after an allow: unexpected
                continue
            expected = min(base * 2 ** (k - 1), cap)
            measured = seq[k][0] - t_prev
            r = rows[k]
            r["expected"].append(expected)
            r["measured"].append(measured)
            r["excess"].append(measured - expected)
            if len(logged) >= k:
                r["back"].append(logged[k - 1] - t_prev)
                r["ahead"].append(seq[k][0] - logged[k - 1] - expected)
    out: dict[int, dict[str, Any]] = {}
    for k in sorted(rows):
        r = rows[k]
        out[k] = {
            "count": len(r["measured"]),
            "expected": r["expected"][0] if r["expected"] else None,
            "measured": stats(r["measured"]),
            "excess": stats(r["excess"]),
            "back": stats(r["back"]),
            "ahead": stats(r["ahead"]),
            "unexpected_calls": len(r["not_after_error"]),
        }
    return out


async def main_async(args: argparse.Namespace) -> None:
    info = machine()
    deadline = time.monotonic() + args.timeout
    with tempfile.TemporaryDirectory(prefix="e2e-backoff-") as tmp:
        workdir = Path(tmp)
        async with LocalCluster(workdir / "cluster") as cluster:
            kube = await load_kube(cluster)
            observer = Observer(cluster)
            ctl = None
            try:
                await fixtures.setup_namespace(kube, NS)
                webhook = LoggingWebhook(cluster, NS, args.error, args.seed)
                async with webhook:
                    ctl = Controller(cluster.kubeconfig, workdir / "controller.log",
                                     workers=args.workers, extra=[
                                         "--backoff-base-delay", str(args.base_delay),
                                         "--backoff-max-delay", str(args.max_delay),
                                         "--rate-limit-qps", "100000",
                                         "--rate-limit-burst", "100000",
                                         "--max-retries", "0", "--max-retry-duration", "0",
                                     ])
                    quiet = await wait_quiet()
                    await ctl.start()
                    await ctl.wait_ready(120)
                    await observer.start(deadline)
                    names = [f"br-{i:06d}" for i in range(args.n)]
                    log(f"creating {args.n} BuildRuns; webhook fails {args.error:.0%} of calls")
                    t0 = time.monotonic()
                    await bounded(names,
                                  lambda nm: kube.create(BUILDRUNS, NS, fixtures.buildrun(nm)),
                                  concurrency=args.concurrency, deadline=deadline)
                    await observer.wait("taskrun", names, deadline)
                    seconds = time.monotonic() - t0
                    reconciles = await ctl.reconciles()
                    samples = await ctl.scrape()
                    calls = list(webhook.log)
            finally:
                await observer.stop()
                if ctl is not None:
                    await ctl.stop()
                await kube.close()
        failures = controller_failures(workdir / "controller.log")
    table = analyse(calls, failures, observer.taskrun_name, args.base_delay, args.max_delay)
    errors = sum(1 for c in calls if c[2] == "error")
    print(f"machine: {info}")
    print(f"command: {command_line()}")
    print(f"{args.n} BuildRuns all with a TaskRun after {seconds:.1f} s; webhook calls "
          f"{len(calls)}, errors {errors} ({errors / len(calls):.1%}); controller logged "
          f"{sum(map(len, failures.values()))} failed reconciles; reconciles {reconciles}; "
          f"busy before {quiet['busy_2s']}, load {quiet['loadavg']}")
    print("| retry | count | expected s | measured median s | measured p90 s | excess median s "
          "| excess p90 s | excess min s | back median s | ahead median s | ahead p90 s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, r in table.items():
        if not r["count"]:
            continue
        m, e, b, a = r["measured"], r["excess"], r["back"], r["ahead"]
        print(f"| {k} | {r['count']} | {r['expected']} | {m['median']} | {m['p90']} "
              f"| {e['median']} | {e['p90']} | {e['min']} | {b.get('median', '-')} "
              f"| {a.get('median', '-')} | {a.get('p90', '-')} |")
    queue = histogram_quantiles(samples, "workqueue_queue_duration_seconds")
    work = histogram_quantiles(samples, "workqueue_work_duration_seconds")
    print(f"every key of the buildrun queue (controller's /metrics): waited in the queue "
          f"{queue}; reconcile took {work} (seconds; p*_le are bucket bounds)")
    unexpected = sum(r["unexpected_calls"] for r in table.values())
    print(f"calls that followed an allowed call for the same TaskRun: {unexpected} (expect 0)")
    path = write_results("backoff", {
        "machine": info, "command": command_line(), "quiet_before": quiet,
        "seconds": seconds, "calls": len(calls), "errors": errors, "reconciles": reconciles,
        "table": table, "queue_duration": queue, "work_duration": work,
        "end_load": machine()["loadavg"]})
    print(f"raw: {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--error", type=float, default=0.2, help="share of webhook calls that fail")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--base-delay", type=float, default=0.1)
    p.add_argument("--max-delay", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--timeout", type=float, default=900)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

"""Latency at steady arrivals on the real-Tekton stack, ours against Shipwright's.

    .venv/bin/python -m bench.e2e.steady --rate 20 50 --duration 300 --mode controller peer

A burst measures throughput; a user sees latency, and a cluster sees a steady stream.
Each run gets a fresh devtools.cluster.stack.TektonStack (kwok plays the kubelet, real
Tekton), the bench's BuildStrategy and Build, ours or Shipwright's controller (as
bench.e2e.stack_e2e starts them) and one untimed warm-up BuildRun. Then BuildRuns are
created at --rate a second for --duration seconds, each at its own time (t0 + i/rate,
whatever the earlier creates are doing; at most --in-flight creates open), and the
run waits for every one to finish, or with --drain S at most S seconds after the
arrivals: Tekton on two cores finishes about 5.5 TaskRuns a second (measured at 20/s),
so 50/s for five minutes would take it 45 minutes more.

Two watches of the bench's own (one connection each) time what the user sees:

- start:  the BuildRun's create returned -> its TaskRun first seen (the TaskRun watch);
- finish: the TaskRun first seen finished by Tekton -> the BuildRun's completionTime
          first seen (the BuildRun watch).

p50 / p99 / max of each, and who set the pace: sampled every second, the controller's
backlogs (BuildRuns created without a TaskRun yet; TaskRuns finished whose BuildRun
has no completionTime yet) beside Tekton's (TaskRuns not finished). A controller that
keeps up holds its backlogs near rate x its latency; one that sets the pace grows them
for the whole run. The arrivals achieved are reported too: a create that returns late
(the API server saturated) delays the ones after it only by --in-flight.

Tekton's controller as shipped is held to 10 QPS by its client and sets the pace near 3
TaskRuns a second here, so at 20 or 50 a second the finish side would time Tekton's
queue, not the controller. `--tekton-env KUBE_API_QPS=50 KUBE_API_BURST=100
THREADS_PER_CONTROLLER=16` gives it what its performance guide tells an admin to and the
soak gives it (soak/run.py).

`--real-node`: real builds instead, on the stack's real node (devtools.node.realnode):
Shipwright's buildah sample with managed push, each BuildRun building and pushing an
image of its own to the stack's registry, as the truth soak's successes (soak/builds.py).
At a rate the node can hold (two cores: 0.2 a second, a build every five seconds, each
taking about 8 s) it says what a user of a real cluster sees; the figures add each run's
own time (its TaskRun first seen -> seen finished by Tekton) for scale.

    .venv/bin/python -m bench.e2e.steady --real-node --rate 0.2 --duration 150
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.e2e import peer
from bench.e2e.common import (
    NS,
    Controller,
    Observer,
    add_tekton_env_option,
    load_kube,
    log,
    machine,
    outcomes,
    outcomes_text,
    report,
    summary,
    tekton_env,
    wait_quiet,
    warm_up,
)
from controller.runtime.kube import JSON
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.stack import TektonStack
from devtools.node.realnode import NodeUnavailable
from soak import builds


class TaskRunTimes(Observer):
    """The bench's watch on TaskRuns: by BuildRun name, when its TaskRun was first seen
    (`taskrun_at`, so Observer.wait("taskrun") waits for it) and first seen finished
    (Succeeded True or False)."""

    group_version, plural = "tekton.dev/v1", "taskruns"

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(cluster)
        self.finished_at: dict[str, float] = {}

    def _see(self, obj: JSON, now: float) -> None:
        buildrun = (obj["metadata"].get("labels") or {}).get(LABEL_BUILDRUN)
        if not buildrun:
            return
        self.taskrun_at.setdefault(buildrun, now)
        condition = succeeded_condition(obj.get("status"))
        if condition is not None and condition.get("status") in ("True", "False"):
            self.finished_at.setdefault(buildrun, now)


async def arrive(names: list[str], rate: float, in_flight: int,
                 create: Any) -> tuple[dict[str, float], float]:
    """Creates name i at t0 + i/rate (or as soon as a slot frees); when each returned,
    and the seconds from t0 to the last return."""
    slots = asyncio.Semaphore(in_flight)
    done: dict[str, float] = {}
    t0 = time.monotonic()

    async def one(i: int, name: str) -> None:
        await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        async with slots:
            await create(name)
        done[name] = time.monotonic()

    await asyncio.gather(*(one(i, name) for i, name in enumerate(names)))
    return done, time.monotonic() - t0


async def sample_backlogs(created: dict[str, float], observer: Observer,
                          taskruns: TaskRunTimes, into: list[dict[str, int]]) -> None:
    """Every second until cancelled: the controller's start and finish backlogs and
    Tekton's (see the module's docstring)."""
    while True:
        await asyncio.sleep(1.0)
        into.append({
            "start": sum(1 for x in created if x not in taskruns.taskrun_at),
            "finish": sum(1 for x in taskruns.finished_at if x not in observer.done_at
                          and x in created),
            "tekton": sum(1 for x in taskruns.taskrun_at if x not in taskruns.finished_at
                          and x in created),
        })


def _backlog(samples: list[dict[str, int]], key: str) -> dict[str, float]:
    values = [s[key] for s in samples] or [0]
    half = values[len(values) // 2:]  # the second half: steady state, not the ramp
    return {"max": max(values), "mean_second_half": round(sum(half) / len(half), 1)}


async def one_run(mode: str, rate: float, args: argparse.Namespace,
                  workdir: Path) -> dict[str, Any]:
    n = int(rate * args.duration)
    out: dict[str, Any] = {"mode": mode, "rate": rate, "n": n, "workers": args.workers,
                           "real_node": args.real_node,
                           "quiet_before": await wait_quiet(max_wait=args.quiet_wait),
                           "load_before": machine()["loadavg"], "tekton_env": tekton_env(args)}
    deadline = time.monotonic() + args.duration + args.timeout
    stack = TektonStack(workdir / "stack", tekton_controller_env=out["tekton_env"],
                        real_node=args.real_node)
    if args.real_node and stack.real_node_unavailable:
        raise NodeUnavailable(stack.real_node_unavailable)
    async with stack:
        cluster = stack.cluster
        node = await stack.real_node() if args.real_node else None
        kube = await load_kube(cluster)
        observer, taskruns = Observer(cluster), TaskRunTimes(cluster)
        ctl: Controller
        if mode == "peer":
            await peer.apply_crds(cluster, taskruns=False)
        await fixtures.setup_namespace(kube, NS)
        await peer.add_service_account(kube)
        if mode == "peer":
            ctl = peer.ShipwrightController(cluster.kubeconfig, workdir / "peer.log",
                                            workers=args.workers, workdir=workdir)
        else:
            ctl = Controller(cluster.kubeconfig, workdir / "controller.log",
                             workers=args.workers)
        if node is not None:
            # The helper steps' images (Git, image processing) from the stack's registry.
            ctl.env = {**(ctl.env or os.environ), **node.images.shipwright_env()}
        samples: list[dict[str, int]] = []
        sampler: asyncio.Task[None] | None = None
        try:
            await observer.start(deadline)
            await taskruns.start(deadline)
            await ctl.start()
            await ctl.wait_ready(120)
            await warm_up(kube, observer, deadline, simulate=False)
            if node is not None:
                await builds.setup(kube, node, NS)
            names = [f"br-{i:06d}" for i in range(n)]
            created: dict[str, float] = {}

            def body(name: str) -> JSON:
                if node is None:
                    return fixtures.buildrun(name)
                return builds.buildrun(node, NS, name, builds.SUCCESS, 1)

            async def create(name: str) -> None:
                await kube.create(BUILDRUNS, NS, body(name))
                created[name] = time.monotonic()

            log(f"steady {mode} {rate}/s for {args.duration} s ({n} BuildRuns)")
            sampler = asyncio.create_task(
                sample_backlogs(created, observer, taskruns, samples))
            returned, seconds = await arrive(names, rate, args.in_flight, create)
            await taskruns.wait("taskrun", names, deadline)
            if args.drain is None:
                await observer.wait("done", names, deadline)
            else:
                # Tekton's pace, not the controller's, decides when the last one ends.
                with contextlib.suppress(TimeoutError):
                    await observer.wait("done", names,
                                        min(deadline, time.monotonic() + args.drain))
            start = [taskruns.taskrun_at[x] - returned[x] for x in names]
            ended = [x for x in names if x in taskruns.finished_at and x in observer.done_at]
            finish = [observer.done_at[x] - taskruns.finished_at[x] for x in ended]
            if node is not None:
                run = [taskruns.finished_at[x] - taskruns.taskrun_at[x] for x in ended]
                out["run"] = summary(run)
            out.update({
                "finished_by_tekton": len(ended),
                "arrivals_per_second": round(n / seconds, 2),
                "start": summary(start),
                "finish": summary(finish),
                "backlog": {k: _backlog(samples, k) for k in ("start", "finish", "tekton")},
                "outcomes": await outcomes(kube),
                "usage": vars(ctl.usage()),
            })
            log(f"  {out}")
        finally:
            if sampler is not None:
                sampler.cancel()
            await observer.stop()
            await taskruns.stop()
            out["exit_code"] = await ctl.stop()
            await kube.close()
    return out


def _backlog_text(backlog: dict[str, float]) -> str:
    return f"{backlog['max']} ({backlog['mean_second_half']})"


def table(runs: list[dict[str, Any]]) -> str:
    rows = ["| mode | rate /s | N | arrivals /s | start p50 / p99 / max s "
            "| finish p50 / p99 / max s | backlog max (2nd-half mean): start / finish / "
            "Tekton | ctl peak RSS MiB | outcomes | load 1m before |",
            "|---|---:|---:|---:|---|---|---|---:|---|---:|"]
    for r in runs:
        s, f, b = r["start"], r["finish"], r["backlog"]
        rows.append(
            f"| {r['mode']}"
            + (f", real node (each run p50 / max {r['run']['p50']} / {r['run']['max']} s)"
               if "run" in r else "")
            + " "
            f"| {r['rate']:g} | {r['n']:,}"
            + (f" ({r['finished_by_tekton']:,} finished)"
               if r.get("finished_by_tekton", r["n"]) < r["n"] else "")
            + f" | {r['arrivals_per_second']} "
            f"| {s['p50']} / {s['p99']} / {s['max']} | {f['p50']} / {f['p99']} / {f['max']} "
            f"| {' / '.join(_backlog_text(b[k]) for k in b)} "
            f"| {round(r['usage']['hwm_kib'] / 1024, 1)} "
            f"| {outcomes_text(r['outcomes'])} "
            f"| {r['load_before'][0]} |")
    return "\n".join(rows)


async def main_async(args: argparse.Namespace) -> None:
    info = machine()
    runs = []
    for _ in range(args.repeat):
        for rate in args.rate:
            for mode in args.mode:
                with tempfile.TemporaryDirectory(prefix="e2e-steady-") as tmp:
                    runs.append(await one_run(mode, rate, args, Path(tmp)))
                print(table(runs[-1:]).splitlines()[-1], flush=True)
    report("steady", info, runs, table(runs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", nargs="+", default=["controller", "peer"],
                   choices=["controller", "peer"])
    p.add_argument("--rate", type=float, nargs="+", default=[20.0, 50.0],
                   help="BuildRuns created a second")
    p.add_argument("--duration", type=float, default=300.0, help="seconds of arrivals")
    p.add_argument("--workers", type=int, default=16,
                   help="max concurrent reconciles, both controllers")
    p.add_argument("--in-flight", type=int, default=64, help="creates open at once, at most")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the whole list this many times, the modes alternating per rate")
    add_tekton_env_option(p)
    p.add_argument("--real-node", action="store_true",
                   help="real builds on the stack's real node (see above), not kwok's pods")
    p.add_argument("--drain", type=float, metavar="SECONDS",
                   help="after the arrivals (and every TaskRun seen), wait at most this long "
                   "for Tekton to finish them; the finish figures are over those it did "
                   "(finished_by_tekton). Default: wait for every one (--timeout)")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds after the arrivals end for every BuildRun to finish")
    p.add_argument("--quiet-wait", type=float, default=300, metavar="SECONDS",
                   help="wait at most this long before each run for a quiet machine")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

"""End to end on the real-Tekton stack: BuildRun created -> TaskRun -> pod -> Succeeded.

    .venv/bin/python -m bench.e2e.stack_e2e --mode controller peer bare --n 200 --repeat 2

Each run gets a fresh devtools.cluster.stack.TektonStack (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok playing the kubelet of one Node, Tekton
Pipelines' controller and webhook, v1.12.0 as hack/tekton pins it), a namespace with the bench's
BuildStrategy and Build, and the benchmark's own watch on BuildRuns (Observer). By
--mode, ours (`python -m controller`, --max-concurrent-reconciles W) or Shipwright's
own (bench.e2e.peer, BUILDRUN_MAX_CONCURRENT_RECONCILES W, over Shipwright's CRDs
applied in place of ours; Tekton's TaskRun CRD serves v1beta1 already) runs against
it. After one untimed warm-up BuildRun through the whole path, N BuildRuns are
created, --concurrency at a time, and nothing else is done: Tekton makes each pod,
the scheduler binds it, kwok runs it to Succeeded (the default fate, no delays), Tekton
finishes the TaskRun and the controller the BuildRun.

Reported: time from the first create to the last BuildRun with completionTime, N /
that time, p50/p99 of create-returned -> taskRunName seen and -> completionTime seen;
CPU ms per BuildRun of each process apart (the controller, kube-apiserver, etcd,
Tekton's controller and webhook, kwok, kube-scheduler, kube-controller-manager, this
process); requests per BuildRun by verb and resource (apiserver_request_total; pods,
TaskRuns, Events and the rest); the controller's peak RSS; the outcomes (reason of
each BuildRun's Succeeded condition).

--mode bare is the ceiling of that path: no controller; this process makes, per
BuildRun, the writes ours makes, with the bodies ours sends and as its field manager
(bodies.as_controller), --concurrency at a time: create the BuildRun, the label PATCH
(bodies.label_patch), create its TaskRun (bodies.controller_taskrun: the controller's
own generate_taskrun), update the BuildRun's status (status_writes.status_update of
bodies.started_status: taskRunName, executor, buildSpec, Pending); and, from its own
watch on TaskRuns, when Tekton has finished one, the BuildRun's terminal status update
(bodies.finished_status, from the TaskRun Tekton finished;
no Event, no Pending/Running progress writes, no GET of the pod). Tekton, kwok and the
rest do what they do for a controller. Its latency to the TaskRun counts
from the return of the whole start sequence, so it is not comparable: it is left out.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.e2e import peer
from bench.e2e.bodies import (
    as_controller,
    controller_taskrun,
    finished_status,
    label_patch,
    started_status,
)
from bench.e2e.common import (
    NS,
    WARMUP,
    Controller,
    CpuMeter,
    Observer,
    add_tekton_env_option,
    apiserver_requests,
    bounded,
    load_kube,
    log,
    machine,
    outcomes,
    outcomes_text,
    per_buildrun_ms,
    per_object,
    report,
    requests_text,
    summary,
    tekton_env,
    wait_quiet,
    warm_up,
)
from controller.buildrun.status_writes import status_update
from controller.runtime.kube import JSON, PODS, Kube
from controller.runtime.timestamps import parse_time
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.stack import TektonStack

# stack.pids() names -> the short names the tables use.
PROCESSES = {"kube-apiserver": "apiserver", "etcd": "etcd",
             "tekton-controller": "tekton-controller", "tekton-webhook": "tekton-webhook",
             "kwok": "kwok", "kube-scheduler": "scheduler",
             "kube-controller-manager": "kcm"}


class TaskRunFinisher(Observer):
    """--mode bare's stand-in for the controller's finish: its own watch on TaskRuns;
    each that Tekton finished (Succeeded True or False) gets its BuildRun's terminal
    status update, once, --concurrency at a time."""

    group_version, plural = "tekton.dev/v1", "taskruns"

    def __init__(self, cluster: LocalCluster, kube: Kube, concurrency: int) -> None:
        super().__init__(cluster)
        self.kube = kube
        self.started: dict[str, JSON] = {}  # BuildRun name -> as its started status left it
        self.finished: set[str] = set()
        self.slots = asyncio.Semaphore(concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self.errors: list[str] = []
        self.taskruns_failed = 0  # their BuildRuns finish with the failure, as ours would

    def _see(self, obj: JSON, now: float) -> None:
        name = obj["metadata"]["name"]
        buildrun = (obj["metadata"].get("labels") or {}).get("buildrun.shipwright.io/name")
        verdict = next((c.get("status") for c in (obj.get("status") or {}).get("conditions")
                        or [] if c.get("type") == "Succeeded"), None)
        if buildrun and verdict in ("True", "False") and name not in self.finished:
            self.finished.add(name)
            self.taskruns_failed += verdict == "False"
            task = asyncio.create_task(self._finish(buildrun, obj))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _finish(self, buildrun: str, taskrun: JSON) -> None:
        async with self.slots:
            try:
                br = self.started[buildrun]
                await self.kube.put(BUILDRUNS, NS, buildrun, status_update(
                    br, finished_status(br["status"], taskrun)), subresource="status")
            except Exception as exc:  # recorded; the run then times out waiting for it
                self.errors.append(f"{buildrun}: {exc!r}")


def _seconds(later: str | None, earlier: str | None) -> float | None:
    a, b = parse_time(later), parse_time(earlier)
    return None if a is None or b is None else (a - b).total_seconds()


async def rampup_sources(kube: Kube) -> dict[str, Any]:
    """Issue 26.4: could the finish phase read Shipwright's two ramp-up figures off the
    TaskRun status Tekton writes, instead of a GET of the pod? For every finished
    TaskRun, each figure as exported (from the pod: Shipwright's definition) beside its
    nearest TaskRun-status stand-in, and how many of them differ.

    - taskrun ramp-up: pod creationTimestamp - TaskRun creationTimestamp; stand-in:
      status.startTime - creationTimestamp (Tekton's first reconcile, before it makes
      the pod: the status has no pod creation time).
    - pod ramp-up: last init container finishedAt - pod creationTimestamp; stand-in:
      the first step's startedAt - status.startTime (the status lists no init
      containers)."""
    pods = {p["metadata"]["name"]: p for p in (await kube.list(PODS, NS))["items"]}
    pairs: dict[str, list[tuple[float, float]]] = {"taskrun": [], "pod": []}
    for tr in (await kube.list(TASKRUNS, NS))["items"]:
        status = tr.get("status") or {}
        pod = pods.get(status.get("podName") or "")
        if pod is None or not status.get("completionTime"):
            continue
        created = tr["metadata"].get("creationTimestamp")
        pod_created = pod["metadata"].get("creationTimestamp")
        exported = _seconds(pod_created, created)
        stand_in = _seconds(status.get("startTime"), created)
        if exported is not None and stand_in is not None:
            pairs["taskrun"].append((exported, stand_in))
        inits = (pod.get("status") or {}).get("initContainerStatuses") or []
        last_init = ((inits[-1].get("state") or {}).get("terminated") or {}).get(
            "finishedAt") if inits else None
        steps = status.get("steps") or []
        first = steps[0] if steps else {}
        started = ((first.get("terminated") or first.get("running") or {})
                   .get("startedAt"))
        exported = _seconds(last_init, pod_created)
        stand_in = _seconds(started, status.get("startTime"))
        if exported is not None and stand_in is not None:
            pairs["pod"].append((exported, stand_in))
    return {name: {"taskruns": len(v), "differ": sum(1 for a, b in v if a != b),
                   "exported": summary([a for a, _ in v]) if v else {},
                   "stand_in": summary([b for _, b in v]) if v else {}}
            for name, v in pairs.items()}


async def one_run(mode: str, n: int, workers: int, args: argparse.Namespace,
                  workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": mode, "n": n, "workers": workers if mode != "bare" else "-",
                           "concurrency": args.concurrency,
                           "quiet_before": await wait_quiet(max_wait=args.quiet_wait),
                           "load_before": machine()["loadavg"]}
    if mode == "peer":
        out["peer"] = peer.describe()
    deadline = time.monotonic() + args.timeout
    out["tekton_env"] = tekton_env(args)
    async with TektonStack(workdir / "stack",
                           tekton_controller_env=out["tekton_env"]) as stack:
        out["stack_timings"] = stack.timings
        cluster = stack.cluster
        kube = await load_kube(cluster)
        ctl: Controller | None = None
        observer = Observer(cluster)
        finisher: TaskRunFinisher | None = None
        try:
            if mode == "peer":
                await peer.apply_crds(cluster, taskruns=False)
            strategy, build = await fixtures.setup_namespace(kube, NS)
            await peer.add_service_account(kube)  # the serviceaccount controller may lag
            if mode == "peer":
                ctl = peer.ShipwrightController(cluster.kubeconfig, workdir / "peer.log",
                                                workers=workers, workdir=workdir)
            elif mode == "controller":
                ctl = Controller(cluster.kubeconfig, workdir / "controller.log",
                                 workers=workers)
            await observer.start(deadline)

            async def create(name: str) -> None:
                await kube.create(BUILDRUNS, NS, fixtures.buildrun(name))

            writer = as_controller(kube)

            async def bare(name: str) -> None:
                assert finisher is not None
                br = await kube.create(BUILDRUNS, NS, fixtures.buildrun(name))
                taskrun = controller_taskrun(br, build, strategy)
                br = await writer.patch(BUILDRUNS, NS, name, label_patch(br, build))
                tr = await writer.create(TASKRUNS, NS, taskrun)
                finisher.started[name] = await writer.put(BUILDRUNS, NS, name, status_update(
                    br, started_status(br, build, tr)), subresource="status")

            pids = {PROCESSES[k]: v for k, v in stack.pids().items() if k in PROCESSES}
            if ctl is not None:
                await ctl.start()
                live, _ = await ctl.wait_ready(120)
                out["startup"] = {"serving": round(live, 3), "warm_up": round(
                    await warm_up(kube, observer, deadline, simulate=False), 3)}
                pids["controller"] = ctl.pid
                rec0 = await ctl.reconciles()
            else:
                finisher = TaskRunFinisher(cluster, writer, args.concurrency)
                await finisher.start(deadline)
                t = time.monotonic()  # the same warm-up, bare: Tekton's first TaskRun
                await bare(WARMUP)
                await observer.wait("done", [WARMUP], deadline)
                out["startup"] = {"warm_up": round(time.monotonic() - t, 3)}
            meter = CpuMeter(pids)
            names = [f"br-{i:06d}" for i in range(n)]

            log(f"stack {mode} n={n} workers={workers}: create -> Succeeded")
            req0 = await apiserver_requests(cluster)
            meter.start()
            t0 = time.monotonic()
            created = await bounded(names, bare if ctl is None else create,
                                    concurrency=args.concurrency, deadline=deadline)
            await observer.wait("done", names, deadline)
            last = max(observer.done_at[x] for x in names)
            cpu = meter.stop()
            req1 = await apiserver_requests(cluster)
            out["e2e"] = {
                "seconds": round(last - t0, 3),
                "throughput": round(n / (last - t0), 1),
                "creates_seconds": round(created.seconds, 3),
                "transient_retries": created.retries,
                "latency": summary([observer.done_at[x] - created.done_at[x] for x in names]),
                "cpu": cpu,
                "cpu_ms_per_buildrun": per_buildrun_ms(cpu, n),
                "requests_per_buildrun": per_object(req0, req1, n),
            }
            if ctl is not None:
                rec1 = await ctl.reconciles()
                out["e2e"].update({
                    "latency_taskrun": summary(
                        [observer.taskrun_at[x] - created.done_at[x] for x in names]),
                    "reconciles": sum(rec1.values()) - sum(rec0.values()),
                    "usage": vars(ctl.usage()),
                })
            out["outcomes"] = await outcomes(kube)
            out["rampup_sources"] = await rampup_sources(kube)
            log(f"  e2e: {out['e2e']} outcomes {out['outcomes']}")
            log(f"  ramp-up, from the pod vs from the TaskRun status: {out['rampup_sources']}")
        finally:
            await observer.stop()
            if finisher is not None:
                await finisher.stop()
                out["bare_errors"] = finisher.errors[:20]
                out["bare_taskruns_failed"] = finisher.taskruns_failed
            if ctl is not None:
                out["exit_code"] = await ctl.stop()
            await kube.close()
    out["load_after"] = machine()["loadavg"]
    return out


CPU_COLUMNS = ("controller", "apiserver", "etcd", "tekton-controller", "tekton-webhook", "kwok",
               "scheduler", "kcm", "bench")


def table(runs: list[dict[str, Any]]) -> str:
    rows = ["| mode | N | workers | s | BuildRuns/s | ->TaskRun p50/p99 s | ->Succeeded p50/p99 s "
            "| CPU ms/BuildRun: " + " / ".join(CPU_COLUMNS) + " | requests per BuildRun "
            "| ctl peak RSS MiB | outcomes | load 1m before |",
            "|---|---:|---:|---:|---:|---|---|---|---|---:|---|---:|"]
    for r in runs:
        e = r["e2e"]
        ms, lt = e["cpu_ms_per_buildrun"], e.get("latency_taskrun", {})
        hwm = e.get("usage", {}).get("hwm_kib")
        rows.append(
            f"| {r['mode']} | {r['n']:,} | {r['workers']} | {e['seconds']:.1f} "
            f"| {e['throughput']:,.1f} "
            f"| {lt.get('p50', '-')} / {lt.get('p99', '-')} "
            f"| {e['latency']['p50']} / {e['latency']['p99']} "
            f"| {' / '.join(str(ms.get(k, '-')) for k in CPU_COLUMNS)} "
            f"| {requests_text(e['requests_per_buildrun'])} "
            f"| {'-' if hwm is None else round(hwm / 1024, 1)} "
            f"| {outcomes_text(r['outcomes'])} "
            f"| {r['load_before'][0]} |")
    return "\n".join(rows)


async def main_async(args: argparse.Namespace) -> None:
    info = machine()
    runs = []
    for _ in range(args.repeat):
        for n in args.n:
            for mode in args.mode:
                workers = args.peer_workers if mode == "peer" and args.peer_workers else (
                    args.workers)
                with tempfile.TemporaryDirectory(prefix="e2e-stack-") as tmp:
                    runs.append(await one_run(mode, n, workers, args, Path(tmp)))
                print(table(runs[-1:]).splitlines()[-1], flush=True)
    report("stack", info, runs, table(runs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", nargs="+", default=["controller", "peer"],
                   choices=["controller", "peer", "bare"])
    p.add_argument("--n", type=int, nargs="+", default=[200])
    p.add_argument("--workers", type=int, default=16,
                   help="--max-concurrent-reconciles for ours")
    p.add_argument("--peer-workers", type=int,
                   help="BUILDRUN_MAX_CONCURRENT_RECONCILES for Shipwright's; default --workers")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the whole list this many times, the modes alternating per N")
    p.add_argument("--concurrency", type=int, default=32, help="creates in flight")
    add_tekton_env_option(p)
    p.add_argument("--timeout", type=float, default=1200, help="bound on each run, seconds")
    p.add_argument("--quiet-wait", type=float, default=300, metavar="SECONDS",
                   help="wait at most this long before each run for a quiet machine")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

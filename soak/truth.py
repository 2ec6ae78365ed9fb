"""The truth soak: real builds on the real node under faults, each BuildRun's outcome
checked against the registry.

    .venv/bin/python -m soak.truth --builds 36 --seed 1
    .venv/bin/python -m soak.truth --help

It starts its own stack with a real node (devtools.cluster.stack.TektonStack: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, Tekton's controller and
webhook; containerd, a kubelet, a registry and a Git server, devtools.node.realnode),
runs the controller as replica subprocesses with leader election (soak.replicas), and
runs `--builds` real builds of Shipwright's buildah sample (soak.builds: each BuildRun
pushing to its own tag; some fail, some time out, some are cancelled once their build
step has ended, some are deleted while they build and created again under the same
name), `--concurrency` at a time. Meanwhile, one after another at random (seeded)
times, each waiting up to `--mid-build-wait` seconds for a build to be mid-build:

    controller          a replica SIGKILLed (80 %) or SIGTERMed, the leader 75 % of the
                        time; its slot starts again 0.5-3 s later
    apiserver           kube-apiserver SIGKILLed and started again on the same etcd
    kubelet             the kubelet SIGTERMed (as `systemctl restart`) or SIGKILLed, and
                        started again; the pods run on (RealNode.restart)
    containerd          containerd the same; the containers run on under their shims
    tekton-controller   Tekton's controller SIGKILLed, started again 0.5 s later

Once every build has finished (and every fault kind has happened at least once) the
faults stop; once every pod has ended, the registry is read: for every BuildRun uid,
the manifest under its tag must be what it reports (soak.ledger: an image pushed for it
<=> Succeeded with exactly that digest), no status may change after completionTime, and
no uid may have more than one TaskRun. The soak follows BuildRuns, TaskRuns and pods
with its own list+watch (soak.watch). It prints the report (builds by kind, faults,
mismatches by kind, durations) and exits 1 on any mismatch, 2 if the soak itself
failed; `--json FILE` writes the report as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from controller.runtime.errors import is_already_exists, is_not_found
from controller.runtime.kube import PODS, ApiError, Kube, load_api_client
from controller.runtime.timestamps import format_micro_time, format_time, now, parse_time
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.polling import wait_until
from devtools.cluster.stack import TektonStack
from devtools.node.realnode import CONTAINERD, KUBELET, NodeUnavailable, RealNode
from soak import builds
from soak.actors import poisson
from soak.api import default_service_account, persist
from soak.cli import print_run_header, progress_on_stderr
from soak.ledger import (
    ATTEMPT_LABEL,
    BUILD_STEP,
    PUSH_STEP,
    BuildRunSeen,
    Ledger,
    Mismatch,
    by_kind,
    judge,
)
from soak.replicas import ReplicaSet, summarize_log
from soak.watch import Follower

NS = "truth"
FAULTS = ("controller", "apiserver", KUBELET, CONTAINERD, "tekton-controller")


@dataclass(frozen=True)
class Config:
    builds: int = 36
    seed: int = 1
    concurrency: int = 3  # builds at once
    weights: tuple[float, ...] = (0.25, 0.15, 0.15, 0.2, 0.15, 0.1)  # in builds.KINDS order
    slow_timeout: str = "40s"  # spec.timeout of the builds planned to time out
    # spec.timeout of every other build: a node restart can leave a build hung for good
    # (a step's container that failed to start, StartError, while containerd restarted:
    # the next step waits for it for ever, and Tekton's TaskRun runs on), which a timeout
    # then ends, as it would in a cluster (Tekton's own default is an hour).
    build_timeout: str = "5m"
    late_window: float = 2.0  # cancels and late deletes: up to this long after the build step
    fault_every: float = 30.0  # mean seconds between faults; 0: none
    faults: tuple[str, ...] = FAULTS
    mid_build_wait: float = 60.0  # a fault waits this long for a build to be mid-build
    replicas: int = 2
    max_retries: int = 8
    build_seconds: float = 900.0  # a BuildRun not finished this long after its creation is lost
    settle_seconds: float = 300.0  # then every pod must end within this
    deadline: float = 5400.0  # the whole soak, setup included
    workdir: Path | None = None


@dataclass(frozen=True)
class Planned:
    name: str
    kind: str  # builds.KINDS
    delay: float  # cancel-late and recreate at the build step's end: seconds after it
    delete_mid_build: bool  # recreate: deleted mid-build (else once the build step ended)


def make_plan(cfg: Config) -> list[Planned]:
    """`cfg.builds` builds, as many of each kind as the weights say (largest remainder),
    in an order drawn from the seed."""
    rng = random.Random(f"{cfg.seed}:plan")
    total = sum(cfg.weights)
    exact = [cfg.builds * w / total for w in cfg.weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[
            :cfg.builds - sum(counts)]:
        counts[i] += 1
    kinds = [k for k, n in zip(builds.KINDS, counts, strict=True) for _ in range(n)]
    rng.shuffle(kinds)
    return [Planned(f"b{i:02d}-{kind}", kind, round(rng.uniform(0, cfg.late_window), 2),
                    rng.random() < 0.5)
            for i, kind in enumerate(kinds)]


@dataclass
class Fault:
    kind: str
    at: float  # seconds since the builds began
    seconds: float  # how long the injection took (down time for restarts)
    mid_build: list[str]  # BuildRuns mid-build when it struck
    running: list[str]  # pods not ended when it struck
    detail: dict[str, Any]


@dataclass
class Action:
    """A cancel or a delete the soak sent, and what the pod showed then."""

    what: str  # "cancel", "delete mid-build", "delete after the build step"
    name: str
    uid: str
    at: float  # seconds since the builds began
    sent: str  # the wall-clock time it was sent (to set beside the pod's times)
    delay: float  # after the trigger was seen
    steps: str  # the build and push steps' states when it was sent
    answer: str  # "ok", or why not
    # Filled in at the end: when the push step's container ended (its finishedAt, whole
    # seconds), what the registry holds under the tag, and how the BuildRun ended.
    push_ended: str = ""
    registry: str | None = None
    outcome: str = ""


@dataclass
class Report:
    config: dict[str, Any]
    workdir: str
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    planned: dict[str, int] = field(default_factory=dict)
    buildruns: int = 0
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> reason -> n
    pushed: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    fault_log: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    mismatches: dict[str, int] = field(default_factory=dict)
    mismatch_list: list[str] = field(default_factory=list)
    noted: dict[str, list[str]] = field(default_factory=dict)
    durations: dict[str, dict[str, float]] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.mismatch_list

    def text(self) -> str:
        f = self.fault_log
        lines = [
            f"truth soak: {sum(self.planned.values())} builds ({self.buildruns} BuildRuns), "
            f"seed {self.config['seed']}, {self.seconds:.1f} s, {self.config['replicas']} "
            f"replicas, {self.config['concurrency']} builds at once; logs in {self.workdir}",
            "timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()),
            "planned: " + ", ".join(f"{k} {v}" for k, v in self.planned.items()),
            "outcomes by planned kind: " + "; ".join(
                f"{k}: " + ", ".join(f"{r} {n}" for r, n in sorted(v.items()))
                for k, v in self.outcomes.items()),
            f"images in the registry under a BuildRun's tag: {self.pushed}",
            "faults: " + ", ".join(
                f"{k} {n} ({sum(1 for x in f if x['kind'] == k and x['mid_build'])} mid-build)"
                for k, n in self.faults.items()),
        ]
        for x in f:
            lines.append(f"  fault {x['kind']} at {x['at']:.1f} s, {x['seconds']:.2f} s, "
                         f"mid-build {x['mid_build']}, pods {len(x['running'])}: {x['detail']}")
        for a in self.actions:
            lines.append(f"  {a['what']} {a['name']} at {a['at']:.1f} s ({a['sent']}), "
                         f"{a['delay']:.2f} s after the trigger, {a['steps']}: {a['answer']}; "
                         f"push step ended {a['push_ended'] or '-'}, registry "
                         f"{a['registry']}, {a['outcome']}")
        lines.append("mismatches: " + ", ".join(f"{k} {v}" for k, v in self.mismatches.items()))
        lines += [f"  {m}" for m in self.mismatch_list]
        for title, items in self.noted.items():
            lines.append(f"noted, not a mismatch: {title}: {len(items)}")
            lines += [f"  {item}" for item in items[:20]]
        lines.append("durations (creation to completionTime, s): " + "; ".join(
            f"{k}: " + ", ".join(f"{s} {v:.0f}" for s, v in d.items())
            for k, d in self.durations.items()))
        h = self.health
        lines.append(f"health: replica processes {h.get('incarnations')} (exit codes "
                     f"{h.get('exit_codes')}), tracebacks in logs {h.get('tracebacks')}, "
                     f"fatal stops {h.get('fatal')}, pods not ended when the registry was "
                     f"read {h.get('pods_left')}, stack {h.get('stack')}")
        lines.append("result: " + ("OK" if self.ok else "MISMATCH"))
        return "\n".join(lines)


class TruthSoak:
    def __init__(self, cfg: Config, progress: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.progress = progress
        self.plan = make_plan(cfg)
        self.ledger = Ledger()
        self.faults: list[Fault] = []
        self.actions: list[Action] = []
        self.slots = asyncio.Semaphore(cfg.concurrency)
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def run(self) -> Report:
        cfg = self.cfg
        start = self.t0 = time.monotonic()
        workdir = cfg.workdir or Path(tempfile.mkdtemp(prefix="truth-soak-"))
        workdir.mkdir(parents=True, exist_ok=True)
        report = Report(config={k: (str(v) if isinstance(v, Path) else v)
                                for k, v in asdict(cfg).items()}, workdir=str(workdir))
        stack = TektonStack(workdir / "stack", real_node=True)
        if stack.real_node_unavailable:
            raise NodeUnavailable(stack.real_node_unavailable)
        async with stack:
            report.timings["stack up"] = time.monotonic() - start
            node = await stack.real_node()
            report.timings["real node up"] = time.monotonic() - start
            self.progress(f"stack and real node up in {time.monotonic() - start:.1f} s")
            kube = Kube(await load_api_client(str(stack.cluster.kubeconfig)))
            try:
                await self._drive(stack, node, kube, workdir, start + cfg.deadline, report)
            finally:
                await kube.close()
            try:
                stack.check_alive()
                report.health["stack"] = "every process alive"
            except Exception as exc:
                report.health["stack"] = f"a process died: {str(exc)[:300]}"
        report.seconds = time.monotonic() - start
        return report

    async def _drive(self, stack: TektonStack, node: RealNode, kube: Kube, workdir: Path,
                     deadline: float, report: Report) -> None:
        cfg = self.cfg
        await fixtures.create_namespace(kube, NS)
        await default_service_account(kube, NS)
        ledger = self.ledger
        watches = [Follower(kube, BUILDRUNS, NS, ledger.on_buildrun, ledger.on_buildruns_listed),
                   Follower(kube, TASKRUNS, NS, ledger.on_taskrun),
                   Follower(kube, PODS, NS, ledger.on_pod, ledger.on_pods_listed)]
        watching = [asyncio.create_task(w.run()) for w in watches]
        replicas = ReplicaSet([stack.cluster.kubeconfig] * cfg.replicas, workdir,
                              max_retries=cfg.max_retries,
                              rng=random.Random(f"{cfg.seed}:replicas"),
                              env=node.images.shipwright_env())
        stop = asyncio.Event()
        chaos: asyncio.Task[None] | None = None
        try:
            for w in watches:
                await asyncio.wait_for(w.synced.wait(), 60)
            await replicas.start()
            await replicas.wait_leader(90)
            await builds.setup(kube, node, NS)
            report.timings["ready to build"] = time.monotonic() - self.t0
            self.t0 = time.monotonic()
            self.progress(f"building {len(self.plan)}, {cfg.concurrency} at once; "
                          f"a fault every {cfg.fault_every:.0f} s on average")
            chaos = asyncio.create_task(self._faults(stack, node, replicas, stop))
            building = asyncio.create_task(self._all_builds(kube, node, deadline))
            ticker = asyncio.create_task(self._ticker())
            try:
                await asyncio.wait([building, chaos], return_when=asyncio.FIRST_COMPLETED)
                if chaos.done():
                    await chaos  # a fault that failed ends the soak
                await building
                self.progress("every build has finished; faults stop once each has happened")
                await wait_until(lambda: self._each_fault_happened() or chaos.done(),
                                 deadline - time.monotonic(), 1.0)
                stop.set()
                await chaos
            finally:
                building.cancel()
                ticker.cancel()
                await asyncio.gather(building, ticker, return_exceptions=True)
            report.timings["builds"] = self.now()
            settle = min(time.monotonic() + cfg.settle_seconds, deadline)
            if not await wait_until(lambda: not self.ledger.pods_running(),
                                    settle - time.monotonic(), 0.5):
                self.progress(f"pods still running: {self.ledger.pods_running()}")
            # A pod still running could push after the registry is read.
            report.health["pods_left"] = self.ledger.pods_running()
            await asyncio.sleep(3.0)  # room for a (wrong) late status write
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)
            final = {}
            for w in watches:  # one last list, through the same hands as the watch's
                final[w.resource.plural] = await persist(w.list_all, deadline=deadline)
            # The evidence behind any mismatch, as the API server held it at the end.
            (workdir / "objects.json").write_text(json.dumps(final, indent=1))
            registry = {b.uid: await asyncio.to_thread(node.registry.pushed, b.image)
                        for b in self.ledger.buildruns.values() if b.image}
        finally:
            stop.set()
            if chaos is not None:
                chaos.cancel()
                await asyncio.gather(chaos, return_exceptions=True)
            await replicas.stop()
            for task in watching:
                task.cancel()
            await asyncio.gather(*watching, return_exceptions=True)
        self._judge(report, registry, replicas)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(15)
            done = sum(1 for b in self.ledger.buildruns.values() if b.finished)
            self.progress(f"t={self.now():.0f}s BuildRuns {len(self.ledger.buildruns)} "
                          f"finished {done} mid-build {len(self.ledger.mid_build())} "
                          f"faults {len(self.faults)} actions {len(self.actions)}")

    # -- the builds ----------------------------------------------------------------

    async def _all_builds(self, kube: Kube, node: RealNode, deadline: float) -> None:
        await asyncio.gather(*(self._build(kube, node, p, deadline) for p in self.plan))

    async def _build(self, kube: Kube, node: RealNode, p: Planned, deadline: float) -> None:
        async with self.slots:
            uid = await self._create(kube, node, p, 1, deadline)
            if p.kind == builds.CANCEL_LATE:
                if await self._until(uid, self._build_step_ended):
                    await asyncio.sleep(p.delay)
                    await self._cancel(kube, p, uid, deadline)
            elif p.kind == builds.CANCEL_EARLY:
                if await self._until(uid, self._mid_build):
                    await self._cancel(kube, p, uid, deadline, mid_build=True)
            elif p.kind == builds.RECREATE:
                trigger = self._mid_build if p.delete_mid_build else self._build_step_ended
                if await self._until(uid, trigger):
                    if not p.delete_mid_build:
                        await asyncio.sleep(p.delay)
                    await self._delete(kube, p, uid, deadline)
                    uid = await self._create(kube, node, p, 2, deadline)
            await wait_until(lambda: self._over(uid), self.cfg.build_seconds, 0.5)

    def _seen(self, uid: str) -> BuildRunSeen | None:
        return self.ledger.buildruns.get(uid)

    def _over(self, uid: str) -> bool:
        b = self._seen(uid)
        return b is not None and (b.finished or b.deleted)

    def _build_step_ended(self, uid: str) -> bool:
        pod = self.ledger.pod_of(uid)
        return pod is not None and pod.succeeded(BUILD_STEP)

    def _mid_build(self, uid: str) -> bool:
        return uid in self.ledger.mid_build()

    async def _until(self, uid: str, trigger: Callable[[str], bool]) -> bool:
        """Waits until `trigger(uid)` or the BuildRun is over; whether the trigger came."""
        await wait_until(lambda: trigger(uid) or self._over(uid), self.cfg.build_seconds, 0.1)
        return trigger(uid) and not self._over(uid)

    async def _create(self, kube: Kube, node: RealNode, p: Planned, attempt: int,
                      deadline: float) -> str:
        timeout = self.cfg.slow_timeout if p.kind == builds.TIMEOUT else self.cfg.build_timeout
        body = builds.buildrun(node, NS, p.name, p.kind, attempt, timeout=timeout)

        async def create() -> str:
            try:
                return str((await kube.create(BUILDRUNS, NS, body))["metadata"]["uid"])
            except ApiError as exc:
                if not is_already_exists(exc):
                    raise
            # Our own create whose answer a restart lost, or the deleted attempt not yet
            # gone: ours only if it is this attempt.
            got = await kube.get(BUILDRUNS, NS, p.name)
            if (got["metadata"].get("labels") or {}).get(ATTEMPT_LABEL) == str(attempt):
                return str(got["metadata"]["uid"])
            raise ApiError(503, "NotYet", f"{p.name}: an earlier attempt is still there")
        return await persist(create, deadline=deadline)

    async def _cancel(self, kube: Kube, p: Planned, uid: str, deadline: float, *,
                      mid_build: bool = False) -> None:
        body = {"spec": {"state": "BuildRunCanceled"}}
        what, delay = ("cancel mid-build", 0.0) if mid_build else ("cancel", p.delay)
        await self._act(what, p, uid, delay, deadline, lambda: kube.patch(
            BUILDRUNS, NS, p.name, body))

    async def _delete(self, kube: Kube, p: Planned, uid: str, deadline: float) -> None:
        what, delay = (("delete mid-build", 0.0) if p.delete_mid_build
                       else ("delete after the build step", p.delay))
        await self._act(what, p, uid, delay, deadline, lambda: kube.delete(
            BUILDRUNS, NS, p.name, preconditions={"uid": uid}))

    async def _act(self, what: str, p: Planned, uid: str, delay: float, deadline: float,
                   call: Callable[[], Awaitable[Any]]) -> None:
        """Sends a cancel or a delete, through restarts; records it with the push step's
        state at that moment."""
        pod = self.ledger.pod_of(uid)
        steps = (f"build {pod.steps.get(BUILD_STEP, '-')}, push {pod.steps.get(PUSH_STEP, '-')}"
                 if pod is not None else "no pod")
        at, sent = self.now(), format_micro_time(now())
        try:
            await persist(call, deadline=deadline)
            answer = "ok"
        except ApiError as exc:
            answer = ("already gone" if is_not_found(exc)
                      else f"refused: {exc.status} {exc.message[:200]}")
        self.actions.append(Action(what, p.name, uid, at, sent, delay, steps, answer))

    # -- the faults ----------------------------------------------------------------

    def _each_fault_happened(self) -> bool:
        return self.cfg.fault_every <= 0 or set(self.cfg.faults) <= {f.kind for f in self.faults}

    async def _faults(self, stack: TektonStack, node: RealNode, replicas: ReplicaSet,
                      stop: asyncio.Event) -> None:
        rng = random.Random(f"{self.cfg.seed}:faults")
        order: list[str] = []

        async def one() -> None:
            if not order:
                order.extend(self.cfg.faults)
                rng.shuffle(order)
            kind = order.pop(0)
            mid = await wait_until(self.ledger.mid_build, self.cfg.mid_build_wait, 0.2) or []
            names = [self.ledger.buildruns[u].name for u in mid if u in self.ledger.buildruns]
            running = self.ledger.pods_running()
            at = self.now()
            t = time.monotonic()
            detail = await self._inject(kind, rng, stack, node, replicas)
            self.faults.append(Fault(kind, at, time.monotonic() - t, names, running, detail))
            self.progress(f"fault {kind} at {at:.0f}s (mid-build: {names}): {detail}")
        await poisson(rng, self.cfg.fault_every, stop, one)

    async def _inject(self, kind: str, rng: random.Random, stack: TektonStack,
                      node: RealNode, replicas: ReplicaSet) -> dict[str, Any]:
        """Injects one fault; what shows it happened (process ids before and after...)."""
        if kind == "controller":
            leader = replicas.leader()
            victim = await replicas.kill(prefer_leader=0.75, sigkill=0.8)
            if victim is None or victim.process is None:
                return {"killed": None}
            code = await asyncio.wait_for(victim.process.wait(), 60)
            return {"slot": victim.slot, "signal": victim.signal_sent,
                    "leader": victim is leader, "exit_code": code}
        if kind == "apiserver":
            before = stack.cluster.pids().get("kube-apiserver")
            await stack.cluster.restart_apiserver()
            return {"pid": [before, stack.cluster.pids().get("kube-apiserver")]}
        if kind in (KUBELET, CONTAINERD):
            sig = signal.SIGTERM if rng.random() < 0.5 else signal.SIGKILL
            done = await node.restart(kind, sig)
            return {"signal": done.signal, "pid": [done.old_pid, done.new_pid],
                    "exit_code": done.exit_code,
                    "shims before, kept, after": [done.shims_before, done.shims_kept,
                                                  done.shims_after]}
        if kind == "tekton-controller":
            before = stack.pids().get("tekton-controller")
            stack.tekton.stop_controller()
            await asyncio.sleep(0.5)
            stack.tekton.start_controller()
            return {"pid": [before, stack.pids().get("tekton-controller")]}
        raise ValueError(f"no such fault: {kind}")

    # -- the verdict ---------------------------------------------------------------

    def _judge(self, report: Report, registry: dict[str, str | None],
               replicas: ReplicaSet) -> None:
        ledger = self.ledger
        mismatches: list[Mismatch] = judge(ledger, registry)
        report.mismatches = by_kind(mismatches)
        report.mismatch_list = [str(m) for m in mismatches]
        report.planned = dict(Counter(p.kind for p in self.plan))
        report.buildruns = len(ledger.buildruns)
        report.pushed = sum(1 for d in registry.values() if d)
        outcomes: dict[str, Counter[str]] = {k: Counter() for k in builds.KINDS}
        durations: dict[str, list[float]] = {}
        for b in ledger.buildruns.values():
            outcome = b.outcome()
            outcomes.setdefault(b.kind, Counter())[outcome] += 1
            took = _seconds(b.created, (b.final or {}).get("completionTime"))
            if took is not None:
                durations.setdefault(outcome, []).append(took)
        report.outcomes = {k: dict(v) for k, v in outcomes.items() if v}
        report.durations = {k: {"min": min(v), "median": statistics.median(v), "max": max(v)}
                            for k, v in sorted(durations.items())}
        report.faults = {k: sum(1 for f in self.faults if f.kind == k) for k in self.cfg.faults}
        report.fault_log = [asdict(f) for f in self.faults]
        for a in self.actions:
            pods = ledger.pods_of(a.uid)
            a.push_ended = " ".join(f"{p.finished_at[PUSH_STEP]} ({p.steps[PUSH_STEP]})"
                                    for p in pods if PUSH_STEP in p.finished_at)
            a.registry = registry.get(a.uid)
            seen = ledger.buildruns.get(a.uid)
            a.outcome = seen.outcome() if seen is not None else "never seen"
        report.actions = [asdict(a) for a in self.actions]
        report.noted = self._noted(registry)
        logs = [summarize_log(i.log) for i in replicas.incarnations]
        report.health.update({
            "incarnations": len(replicas.incarnations),
            "exit_codes": dict(Counter(str(i.exit_code) for i in replicas.incarnations)),
            "tracebacks": sum(len(s.tracebacks) for s in logs),
            "traceback_samples": [t for s in logs for t in s.tracebacks][:5],
            "fatal": sum(len(s.fatal) for s in logs),
        })

    def _noted(self, registry: dict[str, str | None]) -> dict[str, list[str]]:
        """What is no mismatch but worth reading beside them."""
        ledger = self.ledger
        deleted = [f"{b.name} a{b.attempt}: registry {registry.get(b.uid)}"
                   for b in ledger.buildruns.values() if b.deleted and not b.finished]
        times = []
        for b in ledger.buildruns.values():
            runs = ledger.runs_of(b.uid)
            ended = (b.final or {}).get("completionTime")
            if ended and len(runs) == 1 and runs[0].completion_time not in (None, ended):
                times.append(f"{b.name} a{b.attempt} {b.reason()}: completionTime {ended}, "
                             f"its TaskRun's {runs[0].completion_time}")
        unplanned = [f"{b.name} a{b.attempt}: {b.reason()}" for b in ledger.buildruns.values()
                     if b.finished and b.reason() != _planned_reason(b.kind, b.reason())]
        restarted = [f"{p.name}: {p.restarts}" for p in ledger.pods.values() if p.restarts]
        flipped = []
        for r in ledger.runs.values():
            if len(r.ends) > 1:
                owner = ledger.buildruns.get(r.owner or "")
                kept = f"{owner.name} kept {owner.outcome()}" if owner else "no BuildRun"
                flipped.append(f"{r.name}: {' -> '.join(r.ends)} ({r.message[:200]}); {kept}")
        return {
            "BuildRuns deleted before they finished (they claim nothing; what their tag holds)":
                deleted,
            "completionTime other than its TaskRun's": times,
            "outcomes other than the plan's (true to the registry, e.g. a fault failed them)":
                unplanned,
            "pods whose containers were restarted": restarted,
            "TaskRuns whose outcome Tekton changed after it had finished": flipped,
        }


def _planned_reason(kind: str, reason: str) -> str:
    """The reason a build of `kind` ends with when nothing interferes; a cancelled one may
    truly end either way."""
    if kind in builds.CANCELS and reason in ("Succeeded", "BuildRunCanceled"):
        return reason
    return {builds.FAILURE: "Failed", builds.TIMEOUT: "BuildRunTimeout"}.get(kind, "Succeeded")


def _seconds(start: str | None, end: str | None) -> float | None:
    a, b = parse_time(start), parse_time(end)
    return (b - a).total_seconds() if a is not None and b is not None else None


async def truth_soak(cfg: Config, progress: Callable[[str], None] | None = None) -> Report:
    return await TruthSoak(cfg, progress or progress_on_stderr("truth soak")).run()


def parser() -> argparse.ArgumentParser:
    d = Config()
    p = argparse.ArgumentParser(prog="python -m soak.truth", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--builds", type=int, default=d.builds)
    add("--seed", type=int, default=d.seed)
    add("--concurrency", type=int, default=d.concurrency, help="builds at once")
    add("--weights", type=float, nargs=len(builds.KINDS), default=d.weights,
        metavar=tuple(k.upper() for k in builds.KINDS), help="how many of each kind")
    add("--build-timeout", default=d.build_timeout, metavar="DURATION",
        help="spec.timeout of every build not planned to time out")
    add("--slow-timeout", default=d.slow_timeout,
        help="spec.timeout of the builds planned to time out")
    add("--late-window", type=float, default=d.late_window, metavar="SECONDS",
        help="cancels (and deletes at the build step's end) up to this long after it")
    add("--fault-every", type=float, default=d.fault_every, metavar="SECONDS",
        help="mean time between faults (each kind in turn); 0: none")
    add("--faults", nargs="+", choices=FAULTS, default=d.faults)
    add("--mid-build-wait", type=float, default=d.mid_build_wait, metavar="SECONDS")
    add("--replicas", type=int, default=d.replicas)
    add("--max-retries", type=int, default=d.max_retries)
    add("--build-seconds", type=float, default=d.build_seconds,
        help="a BuildRun not finished this long after its creation is lost")
    add("--settle-seconds", type=float, default=d.settle_seconds)
    add("--deadline", type=float, default=d.deadline, help="bound on the whole soak")
    add("--workdir", type=Path, help="keep the stack's data and the replicas' logs here")
    add("--json", type=Path, help="also write the report as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cfg = Config(builds=args.builds, seed=args.seed, concurrency=args.concurrency,
                 weights=tuple(args.weights), slow_timeout=args.slow_timeout,
                 build_timeout=args.build_timeout,
                 late_window=args.late_window, fault_every=args.fault_every,
                 faults=tuple(args.faults), mid_build_wait=args.mid_build_wait,
                 replicas=args.replicas, max_retries=args.max_retries,
                 build_seconds=args.build_seconds, settle_seconds=args.settle_seconds,
                 deadline=args.deadline, workdir=args.workdir)
    started = format_time(now())
    try:
        report = asyncio.run(asyncio.wait_for(truth_soak(cfg), cfg.deadline + 120))
    except NodeUnavailable as exc:
        print(f"truth soak: no real node on this machine: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"truth soak: failed to run: {exc!r}", file=sys.stderr)
        return 2
    print_run_header("soak.truth", argv, started)
    print(report.text())
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

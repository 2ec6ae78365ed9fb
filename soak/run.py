"""Fault soak: N BuildRuns through two controller replicas while the world misbehaves.

    .venv/bin/python -m soak.run --buildruns 500 --seed 1
    .venv/bin/python -m soak.run --buildruns 5000 --seed 7 --timeout 7200

It starts its own whole stack on loopback (devtools.cluster.stack.TektonStack: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok as the kubelet, and
Tekton's real webhook and controller), runs the controller as two
`python -m controller --leader-elect ...` subprocesses, each reaching the API server
through its own devtools.cluster.proxy.Proxy, and creates N BuildRuns (valid ones with a
planned pod outcome, which kwok plays out as devtools.cluster.fates tells it; user errors;
"doomed" ones whose every webhook call fails). Meanwhile, at random (seeded)
times: a TaskRun admission webhook of ours times out or answers 500, the API
server is SIGKILLed and restarted (which also cuts every watch), replicas are
SIGKILLed or SIGTERMed and started again, a second writer patches labels on
BuildRuns so that the controller's status writes conflict, Tekton's webhook is
stopped and started again, Tekton's controller is SIGKILLed and started again,
and the leader's proxy stalls (every connection held open, nothing forwarded) so
that the leader must give up its lease. A separate list+watch records every
BuildRun state seen. At the end it prints:

    lost        BuildRuns without a terminal status within the bound      (must be 0)
    flipped     Succeeded status/reason or completionTime changed after
                completionTime was first seen                            (must be 0)
    duplicated  BuildRuns with more than one TaskRun                     (must be 0)
    wrong       terminal reason other than the planned outcome / user
                error; ReconcilerRetriesExhausted is right only where no
                webhook call was ever allowed (so no TaskRun exists) and
                the replica that gave up had seen max-retries + 1 failed
                tries; those whose budget was partly spent by other
                system errors (API server restarts) are listed apart     (must be 0)
    retries     buildrun_retries_total summed over every replica process
                vs webhook calls that failed (ours, and Tekton's while it
                was stopped, as the API server counted them), with the
                difference broken down from the replicas' own logs

and exits 1 if one of the four invariants is broken (2 if the soak itself failed).
Every knob is a flag; timings are bounded by --timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from controller.buildrun import reasons
from controller.runtime.errors import is_already_exists
from controller.runtime.kube import JSON, ApiError, Kube, load_api_client
from controller.runtime.timestamps import format_time, now
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from controller.shipwright.params import UNDEFINED_PARAMETER
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.fates import FateWebhook, fate_annotations, results
from devtools.cluster.localcluster import LocalCluster, write_token_kubeconfig
from devtools.cluster.polling import wait_until
from devtools.cluster.proxy import Proxy
from devtools.cluster.stack import TektonStack
from devtools.cluster.webhook import Verdict
from soak import accounting
from soak.actors import OUTCOMES, AttributedWebhook, Outcome, SecondWriter, poisson
from soak.api import default_service_account, get_text, persist
from soak.replicas import (
    TEKTON_WEBHOOK_MARKER,
    LogSummary,
    ReplicaSet,
    Sample,
    summarize_log,
)
from soak.watch import Follower, Seen

NS = "soak"

OUTCOME_REASON: dict[Outcome, str] = {
    "success": reasons.SUCCEEDED,
    "failure": reasons.FAILED,
    "timeout": reasons.BUILD_RUN_TIMEOUT,
    "evicted": reasons.POD_EVICTED,
    "oom": reasons.STEP_OUT_OF_MEMORY,
}

# User errors: (what the BuildRun's spec gets, the reason it must end with).
USER_ERRORS: dict[str, tuple[JSON, str]] = {
    "missing-build": ({"build": {"name": "no-such-build"}}, reasons.BUILD_NOT_FOUND),
    "missing-sa": ({"build": {"name": fixtures.BUILD}, "serviceAccount": "ghost"},
                   reasons.SERVICE_ACCOUNT_NOT_FOUND),
    "undefined-param": ({"build": {"name": fixtures.BUILD},
                         "paramValues": [{"name": "colour", "value": "red"}]},
                        UNDEFINED_PARAMETER),
    # The API server admits it (format: duration); Go's time.ParseDuration does not.
    "bad-timeout": ({"build": {"name": fixtures.BUILD}, "timeout": "1 day"},
                    reasons.INVALID_TIMEOUT),
}
DOOMED = "doomed"
DIGEST = "sha256:" + "5a" * 32
# What kwok does with a pod, by planned outcome (hack/kwok/stages/README.md). A
# "timeout" pod holds until Tekton (the TaskRun's timeout) or the controller (the
# BuildRun's) stops it.
FATES: dict[Outcome, dict[str, str]] = {
    "success": {"fate": "succeed", "results": results(**{"shp-image-digest": DIGEST})},
    "failure": {"fate": "fail", "exit_code": "2"},
    "timeout": {"fate": "hold"},
    "evicted": {"fate": "evict"},
    "oom": {"fate": "oom"},
}
# TaskRun reasons Tekton gives when it could not make the pod: an API server restart in
# the middle of the pod create is one (Tekton's handlePodCreationError fails the TaskRun
# for any error it does not know). The BuildRun then rightly ends with Tekton's reason, as
# Shipwright's does.
TEKTON_POD_FAILURES = ("PodCreationFailed", "PodAdmissionFailed")
# Tekton's knative client defaults to 5 QPS (Tekton doubles it, twice) and 2 workers
# per reconciler: too few for thousands of TaskRuns on one node (a first 5000 run with
# them made 264 pods in 322 s while 1129 BuildRuns had been created). The soak gives
# Tekton's controller this instead.
TEKTON_CONTROLLER_ENV = {"KUBE_API_QPS": "50", "KUBE_API_BURST": "100",
                         "THREADS_PER_CONTROLLER": "16"}


@dataclass(frozen=True)
class Config:
    buildruns: int = 500
    seed: int = 1
    create_rate: float = 5.0  # BuildRuns per second
    user_errors: float = 0.10  # fraction of BuildRuns with a user error
    doomed: float = 0.02  # fraction whose every webhook call fails
    outcome_weights: tuple[float, ...] = (0.5, 0.15, 0.1, 0.1, 0.15)  # in OUTCOMES order
    webhook_timeout: float = 0.05  # per call, for the others
    webhook_error: float = 0.15
    apiserver_restart_every: float = 10.0  # mean seconds between restarts; 0: never
    kill_every: float = 8.0  # mean seconds between replica kills; 0: never
    kill_leader: float = 0.75  # chance a kill targets the leader
    sigkill: float = 0.8  # chance a kill is SIGKILL rather than SIGTERM
    conflict_rate: float = 5.0  # label patches per second; 0: none
    tekton_delay: tuple[float, float] = (0.1, 2.0)  # pod Pending, then Running, this long
    buildrun_timeout: str = "6s"  # spec.timeout of runs planned to time out
    tekton_webhook_stop_every: float = 30.0  # mean seconds between stops; 0: never
    tekton_webhook_down: tuple[float, float] = (1.0, 3.0)  # seconds stopped, then started
    tekton_controller_kill_every: float = 30.0  # mean seconds between SIGKILLs; 0: never
    leader_stall_every: float = 30.0  # mean seconds between stalls of the leader's proxy
    leader_stall_seconds: float = 6.0  # longer than the lease (4 s): the leader must go
    max_retries: int = 8
    chaos_seconds: float = 900.0  # faults stop after this long at most
    settle_seconds: float = 180.0  # then everything must finish within this
    timeout: float = 1800.0  # the whole soak, setup included
    workdir: Path | None = None


@dataclass(frozen=True)
class Planned:
    name: str
    kind: str  # an Outcome, "user:<kind>" or "doomed"
    spec: JSON
    expected: str  # the terminal reason


def make_plan(cfg: Config) -> list[Planned]:
    rng = random.Random(f"{cfg.seed}:plan")
    plan = []
    for i in range(cfg.buildruns):
        name = f"br-{i:05d}"
        r = rng.random()
        if r < cfg.user_errors:
            kind = rng.choice(sorted(USER_ERRORS))
            user_spec, reason = USER_ERRORS[kind]
            plan.append(Planned(name, f"user:{kind}", user_spec, reason))
        elif r < cfg.user_errors + cfg.doomed:
            plan.append(Planned(name, DOOMED, {"build": {"name": fixtures.BUILD}},
                                reasons.RECONCILER_RETRIES_EXHAUSTED))
        else:
            how = rng.choices(OUTCOMES, weights=cfg.outcome_weights)[0]
            spec: JSON = {"build": {"name": fixtures.BUILD}}
            if how == "timeout":
                spec["timeout"] = cfg.buildrun_timeout
            plan.append(Planned(name, how, spec, OUTCOME_REASON[how]))
    return plan


Terminal = tuple[str, str, str]


@dataclass
class Track:
    states: int = 0
    terminal: Terminal | None = None
    last: JSON | None = None
    flips: list[str] = field(default_factory=list)
    deleted: bool = False


class Recorder:
    """Every BuildRun state the soak's own watch sees; flags any change to an outcome."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}

    def on_object(self, kind: Seen, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        track = self.tracks.setdefault(name, Track())
        if kind == "DELETED":
            track.deleted = True
            return
        track.states += 1
        track.last = obj
        cond = (succeeded_condition(obj.get("status")) or {})
        now = ((obj.get("status") or {}).get("completionTime") or "",
               str(cond.get("status")), str(cond.get("reason")))
        if track.terminal is None:
            if now[0]:
                track.terminal = now
        elif now != track.terminal:
            track.flips.append(f"{track.terminal} -> {now} "
                               f"(resourceVersion {obj['metadata'].get('resourceVersion')})")

    def done(self, name: str) -> bool:
        track = self.tracks.get(name)
        return track is not None and track.terminal is not None


@dataclass
class Report:
    config: dict[str, Any]
    workdir: str
    seconds: float = 0.0
    created: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    flipped: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    exhausted_mixed: list[str] = field(default_factory=list)
    tekton_failed: list[str] = field(default_factory=list)
    retries: dict[str, Any] = field(default_factory=dict)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.flipped or self.duplicated or self.wrong)

    def text(self) -> str:
        c = self.config
        f = self.faults
        r = self.retries
        lines = [
            f"soak: {self.created} BuildRuns, seed {c['seed']}, {self.seconds:.1f} s, "
            f"2 replicas, max-retries {c['max_retries']}; logs in {self.workdir}",
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items())),
            f"faults: apiserver restarts {f['apiserver_restarts']} "
            f"(down {f['apiserver_down_mean']:.1f} s mean, {f['apiserver_down_max']:.1f} s max); "
            f"replica kills {f['kills']} ({f['kills_leader']} of the leader; "
            f"{f['kills_by_signal']}); replica processes {f['incarnations']} "
            f"(exit codes {f['exit_codes']}); label patches {f['label_patches']} "
            f"({f['label_patches_unfinished']} on unfinished BuildRuns); "
            f"webhook calls {f['webhook_calls']} {f['webhook_verdicts']}; "
            f"Tekton webhook stops {f['tekton_webhook_stops']} "
            f"(down {f['tekton_webhook_down_mean']:.1f} s mean); Tekton controller kills "
            f"{f['tekton_controller_kills']}; leader stalls {f['leader_stalls']} "
            f"({f['leader_stalls_left']} stalled leaders exited; "
            f"{f['leader_stalls_no_leader']} found no leader to stall); "
            f"pods given a fate {f['pods_with_fate']}",
            f"api server answered: {f['apiserver_requests']} (status_conflicts: status "
            "updates refused 409 Conflict; taskrun_already_exists: creates of a TaskRun that "
            "existed, adopted)",
            f"lost: {len(self.lost)}",
            f"flipped: {len(self.flipped)}",
            f"duplicated: {len(self.duplicated)}",
            f"wrong: {len(self.wrong)}",
            f"  of the planned outcomes, {len(self.tekton_failed)} ended with Tekton's reason "
            "because Tekton "
            f"failed their TaskRun itself ({', '.join(TEKTON_POD_FAILURES)}: it could not make "
            "the pod, e.g. the API server restarted mid-create); the controller reported "
            "Tekton's outcome, so these are right, and listed below",
            f"  of {self.reasons.get('ReconcilerRetriesExhausted', 0)} ReconcilerRetriesExhausted, "
            f"{len(self.exhausted_mixed)} spent part of their budget on other system errors "
            "(API server restarts), which the budget counts too (right by the controller's "
            "contract, listed below; wrong by the stricter webhook-failures-only rule)",
            f"retries: buildrun_retries_total {r['metric_total']} {r['metric_by_class']} "
            f"vs webhook failures {r['webhook_failures']} + {r['tekton_webhook_refused']}: "
            f"difference (failures - webhook retries) {r['difference']}",
        ]
        lines += [f"  {line}" for line in r["explained"]]
        lines.append("peak RSS of each replica slot (largest process_resident_memory_bytes "
                     "scraped, every second, over its processes): " + ", ".join(
                         f"slot {k} {v:.1f} MiB" for k, v in sorted(self.peak_rss_mib.items())))
        h = self.health
        lines.append(
            f"health: reconcile panics {h['panics']}, tracebacks in logs {h['tracebacks']}, "
            f"fatal stops {h['fatal']}, lost leases {h['leadership_lost']}, "
            f"non-JSON log lines {h['unstructured']}, reconciles {h['reconciles']}, "
            f"stack {h.get('stack', '?')}"
        )
        for title, items in (("lost", self.lost), ("flipped", self.flipped),
                             ("duplicated", self.duplicated), ("wrong", self.wrong),
                             ("exhausted with other system errors", self.exhausted_mixed),
                             ("failed by Tekton", self.tekton_failed),
                             ("traceback", h.get("traceback_samples", [])),
                             ("fatal stop", [f[:200] for f in h.get("fatal_samples", [])]),
                             ("non-JSON log line", h.get("unstructured_samples", []))):
            for item in items[:20]:
                lines.append(f"  {title}: {item}")
            if len(items) > 20:
                lines.append(f"  {title}: ... and {len(items) - 20} more")
        lines.append("result: " + ("OK" if self.ok else "INVARIANT BROKEN"))
        return "\n".join(lines)


class Soak:
    def __init__(self, cfg: Config, progress: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.progress = progress
        self.plan = make_plan(cfg)
        self.by_name = {p.name: p for p in self.plan}
        self.doomed = {p.name for p in self.plan if p.kind == DOOMED}
        self.outcomes: dict[str, Outcome] = {
            p.name: p.kind for p in self.plan if p.kind in OUTCOMES
        }
        self.recorder = Recorder()
        self.created: list[str] = []
        self.created_set: set[str] = set()
        self.apiserver_kills: list[float] = []
        self.apiserver_down: list[float] = []
        self.kills: list[tuple[float, int, str, bool]] = []  # (time, slot, signal, leader)
        self.apiserver_counts: Counter[str] = Counter()
        self.exhausted_mixed: list[str] = []  # see _exhausted_wrongly
        self.apiserver_scrapes_missed = 0
        self.tekton_webhook_down: list[tuple[float, float]] = []  # (stopped at, seconds)
        self.tekton_controller_kills: list[float] = []
        self.leader_stalls: list[tuple[float, int, bool]] = []  # (time, slot, leader left)
        self.leader_stalls_missed = 0  # no leader to stall at that moment
        self._webhook_rng = random.Random(f"{cfg.seed}:webhook")
        # The timeline is in monotonic seconds, the replicas' logs in wall-clock ones.
        self.wall_minus_monotonic = time.time() - time.monotonic()
        self._fates = self._plan_fates()

    def _plan_fates(self) -> dict[str, dict[str, str]]:
        """Each planned run's pod annotations: its outcome's fate, and a Pending and a
        Running time drawn from tekton_delay."""
        rng = random.Random(f"{self.cfg.seed}:fates")
        lo, hi = self.cfg.tekton_delay
        out = {}
        for name, how in self.outcomes.items():
            out[name] = fate_annotations(
                **FATES[how], start_delay=f"{int(rng.uniform(lo, hi) * 1000)}ms",
                run_duration=f"{int(rng.uniform(lo, hi) * 1000)}ms")
        return out

    def fate(self, namespace: str, buildrun: str) -> dict[str, str] | None:
        return self._fates.get(buildrun) if namespace == NS else None

    def verdict(self, buildrun: str) -> Verdict:
        r = self._webhook_rng.random()
        if buildrun in self.doomed:
            return "timeout" if r < 0.25 else "error"
        if r < self.cfg.webhook_timeout:
            return "timeout"
        if r < self.cfg.webhook_timeout + self.cfg.webhook_error:
            return "error"
        return "allow"

    def unfinished(self) -> list[str]:
        return [n for n in self.created if not self.recorder.done(n)]

    def all_done(self) -> bool:
        return len(self.created) == len(self.plan) and not self.unfinished()

    async def run(self) -> Report:
        cfg = self.cfg
        t0 = time.monotonic()
        hard_deadline = t0 + cfg.timeout
        workdir = cfg.workdir or Path(tempfile.mkdtemp(prefix="soak-"))
        workdir.mkdir(parents=True, exist_ok=True)
        report = Report(config={k: (str(v) if isinstance(v, Path) else v)
                                for k, v in asdict(cfg).items()}, workdir=str(workdir))
        stack = TektonStack(workdir / "stack", tekton_controller_env=TEKTON_CONTROLLER_ENV)
        async with stack:
            self.progress(f"stack up: {stack.timings}")
            cluster = stack.cluster
            kube = Kube(await load_api_client(str(cluster.kubeconfig)))
            try:
                await self._setup(kube)
                webhook = AttributedWebhook(cluster, NS, self.verdict)
                # The soak's own loop answers it while busy: allow more than the 5 s default
                # (a slow answer would fail the pod create, and Tekton the TaskRun).
                fates = FateWebhook(cluster, self.fate, timeout_seconds=15)
                async with webhook, fates:
                    await self._drive(stack, kube, webhook, fates, workdir, hard_deadline,
                                      report)
            finally:
                await kube.close()
        report.seconds = time.monotonic() - t0
        return report

    async def _setup(self, kube: Kube) -> None:
        await fixtures.setup_namespace(kube, NS)
        await default_service_account(kube, NS)

    async def _create(self, kube: Kube, p: Planned) -> None:
        try:
            await kube.create(BUILDRUNS, NS, fixtures.buildrun(p.name, None, **p.spec))
        except ApiError as exc:
            # A create whose answer was lost to a restart, tried again.
            if not is_already_exists(exc):
                raise

    async def _create_all(self, kube: Kube, deadline: float) -> None:
        sem = asyncio.Semaphore(8)

        async def one(p: Planned) -> None:
            async with sem:
                await persist(lambda: self._create(kube, p), deadline=deadline, not_found=True)
            self.created.append(p.name)
            self.created_set.add(p.name)

        tasks = []
        for p in self.plan:
            tasks.append(asyncio.create_task(one(p)))
            await asyncio.sleep(1.0 / self.cfg.create_rate)
        await asyncio.gather(*tasks)

    async def _drive(self, stack: TektonStack, kube: Kube, webhook: AttributedWebhook,
                     fates: FateWebhook, workdir: Path, hard_deadline: float,
                     report: Report) -> None:
        cfg = self.cfg
        cluster = stack.cluster
        buildrun_watch = Follower(kube, BUILDRUNS, NS, self.recorder.on_object)
        watches = [asyncio.create_task(buildrun_watch.run())]
        await asyncio.wait_for(buildrun_watch.synced.wait(), 60)
        proxies = [Proxy("127.0.0.1", cluster.port) for _ in range(2)]
        for p in proxies:
            await p.__aenter__()
        kubeconfigs = [write_token_kubeconfig(workdir / f"kubeconfig-slot-{i}", p.url,
                                              cluster.ca_file, cluster.admin.name,
                                              cluster.admin.token)
                       for i, p in enumerate(proxies)]
        replicas = ReplicaSet(kubeconfigs, workdir, max_retries=cfg.max_retries,
                              rng=random.Random(f"{cfg.seed}:replicas"))
        writer = SecondWriter(kube, NS, random.Random(f"{cfg.seed}:writer"), cfg.conflict_rate,
                              lambda: self.created, self.unfinished)
        stop = asyncio.Event()
        await replicas.start()
        try:
            await replicas.wait_leader(90)
            self.progress("leader elected; creating BuildRuns and injecting faults")
            started = time.monotonic()
            chaos_deadline = min(started + cfg.chaos_seconds, hard_deadline)

            async def restart() -> None:
                # Its counters die with it: take them first.
                await self._add_apiserver_requests(cluster)
                t = time.monotonic()
                self.apiserver_kills.append(t)
                await cluster.restart_apiserver()
                self.apiserver_down.append(time.monotonic() - t)

            async def kill() -> None:
                leader = replicas.leader()
                victim = await replicas.kill(prefer_leader=cfg.kill_leader, sigkill=cfg.sigkill)
                if victim is not None:
                    self.kills.append((time.monotonic(), victim.slot, str(victim.signal_sent),
                                       victim is leader))

            down_rng = random.Random(f"{cfg.seed}:tekton-webhook-down")

            async def tekton_webhook_outage() -> None:
                t = time.monotonic()
                stack.stop_tekton_webhook()
                down = down_rng.uniform(*cfg.tekton_webhook_down)
                await asyncio.sleep(down)
                stack.start_tekton_webhook()  # serving again about a second later
                self.tekton_webhook_down.append((t, down))

            async def tekton_controller_kill() -> None:
                self.tekton_controller_kills.append(time.monotonic())
                stack.stop_tekton_controller()
                await asyncio.sleep(0.5)
                stack.start_tekton_controller()

            async def leader_stall() -> None:
                # Right after a kill there may be none: wait a while for the next one.
                leader = await wait_until(replicas.leader, 15, 0.5)
                if leader is None:
                    self.leader_stalls_missed += 1
                    return
                proxy = proxies[leader.slot]
                t = time.monotonic()
                proxy.stall()
                await asyncio.sleep(cfg.leader_stall_seconds)
                left = not leader.alive  # bounded renewal: it exits before the lease ends
                proxy.resume()
                self.leader_stalls.append((t, leader.slot, left))

            def chaos_task(name: str, every: float, action: Callable[[], object]
                           ) -> asyncio.Task[None]:
                return asyncio.create_task(poisson(random.Random(f"{cfg.seed}:{name}"), every,
                                                   stop, action))

            chaos = [
                chaos_task("restarts", cfg.apiserver_restart_every, restart),
                chaos_task("kills", cfg.kill_every, kill),
                chaos_task("tekton-webhook", cfg.tekton_webhook_stop_every,
                           tekton_webhook_outage),
                chaos_task("tekton-controller", cfg.tekton_controller_kill_every,
                           tekton_controller_kill),
                chaos_task("leader-stall", cfg.leader_stall_every, leader_stall),
                asyncio.create_task(writer.run(stop)),
            ]
            creating = asyncio.create_task(self._create_all(kube, hard_deadline))
            progress = asyncio.create_task(self._report_progress(replicas, fates, webhook))
            try:
                while time.monotonic() < chaos_deadline and not (
                    creating.done() and self.all_done()
                ):
                    if creating.done() and creating.exception() is not None:
                        raise creating.exception()  # type: ignore[misc]
                    for task in chaos:
                        if task.done() and task.exception() is not None:
                            raise task.exception()  # type: ignore[misc]
                    await asyncio.sleep(0.5)
                self.progress("faults stop; waiting for every BuildRun to finish")
                stop.set()
                await asyncio.gather(*chaos)
                for p in proxies:
                    p.resume()
                stack.start_tekton_webhook()
                stack.start_tekton_controller()
                await creating
                await replicas.all_running(60)
                settle_deadline = min(time.monotonic() + cfg.settle_seconds, hard_deadline)
                await wait_until(self.all_done, settle_deadline - time.monotonic(), 0.5)
                # Room for a (wrong) late write to show up on the watch.
                await asyncio.sleep(3.0)
                final = await persist(lambda: kube.list(BUILDRUNS, NS), deadline=hard_deadline)
                for obj in final["items"]:
                    self.recorder.on_object("LISTED", obj)
                taskruns = (await persist(lambda: kube.list(TASKRUNS, NS),
                                          deadline=hard_deadline))["items"]
                await self._add_apiserver_requests(cluster)
            finally:
                stop.set()
                progress.cancel()
                for task in (*chaos, creating):
                    task.cancel()
                await asyncio.gather(progress, *chaos, creating, return_exceptions=True)
        finally:
            await replicas.stop()
            for p in proxies:
                await p.__aexit__(None, None, None)
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
        try:
            stack.check_alive()
            stack_health = "every process alive"
        except Exception as exc:
            stack_health = f"a process died: {str(exc)[:300]}"
        self._judge(report, taskruns, webhook, fates, replicas, writer, buildrun_watch)
        report.health["stack"] = stack_health
        (workdir / "timeline.json").write_text(json.dumps({
            "wall_minus_monotonic": self.wall_minus_monotonic,
            "webhook_calls": webhook.log,
            "replica_kills": self.kills,
            "apiserver_kills": self.apiserver_kills,
            "apiserver_down": self.apiserver_down,
            "tekton_webhook_down": self.tekton_webhook_down,
            "tekton_controller_kills": self.tekton_controller_kills,
            "leader_stalls": self.leader_stalls,
            "replica_processes": [
                {"slot": i.slot, "number": i.number, "log": str(i.log), "started": i.started,
                 "ended": i.ended, "exit_code": i.exit_code, "signal": i.signal_sent,
                 "scraped_at": i.scraped_at,
                 "last_scrape": {f"{k[0]}{dict(k[1])}": v for k, v in i.scrape.items()}}
                for i in replicas.incarnations],
        }, indent=1))

    async def _add_apiserver_requests(self, cluster: LocalCluster) -> None:
        """Adds what the API server counted since it started to apiserver_counts (taken
        before each restart, whose process takes its counters along, and at the end),
        or counts a missed scrape if it did not answer."""
        counts = await apiserver_requests(cluster)
        if counts is not None:
            self.apiserver_counts.update(counts)
        else:
            self.apiserver_scrapes_missed += 1

    async def _report_progress(self, replicas: ReplicaSet, fates: FateWebhook,
                               webhook: AttributedWebhook) -> None:
        t0 = time.monotonic()
        while True:
            await asyncio.sleep(10)
            leader = replicas.leader()
            self.progress(
                f"t={time.monotonic() - t0:.0f}s created {len(self.created)}/{len(self.plan)} "
                f"finished {len(self.created) - len(self.unfinished())} "
                f"pods {fates.calls} "
                f"restarts {len(self.apiserver_kills)} kills {len(self.kills)} "
                f"tekton webhook stops {len(self.tekton_webhook_down)} "
                f"tekton controller kills {len(self.tekton_controller_kills)} "
                f"leader stalls {len(self.leader_stalls)} "
                f"webhook calls {webhook.calls} "
                f"leader {f'slot {leader.slot}' if leader else 'none'}"
            )

    # -- judging ---------------------------------------------------------------------

    def _judge(self, report: Report, taskruns: list[JSON], webhook: AttributedWebhook,
               fates: FateWebhook, replicas: ReplicaSet, writer: SecondWriter,
               watch: Follower) -> None:
        cfg = self.cfg
        report.created = len(self.created)
        budget = cfg.max_retries + 1  # the first try and max_retries retries

        by_owner: dict[str, list[str]] = {}
        for tr in taskruns:
            meta = tr["metadata"]
            owner = next((o["name"] for o in meta.get("ownerReferences") or []
                          if o.get("kind") == "BuildRun" and o.get("controller")), None)
            by_owner.setdefault(owner or f"(no owner) {meta['name']}", []).append(meta["name"])
        report.duplicated = [f"{owner}: {names}" for owner, names in sorted(by_owner.items())
                             if len(names) > 1]
        # What Tekton itself decided for each BuildRun's TaskRun.
        tekton_says: dict[str, JSON] = {}
        for tr in taskruns:
            owner = (tr["metadata"].get("labels") or {}).get(LABEL_BUILDRUN, "")
            tekton_says[owner] = succeeded_condition(tr.get("status")) or {}

        logs = {i.log: summarize_log(i.log) for i in replicas.incarnations}
        self.exhausted_mixed.clear()
        reason_counts: Counter[str] = Counter()
        for p in self.plan:
            track = self.recorder.tracks.get(p.name)
            if track is None or track.terminal is None:
                last = track and track.last and succeeded_condition(track.last.get("status"))
                report.lost.append(f"{p.name} ({p.kind}): last seen {last or 'nothing'}")
                continue
            report.flipped += [f"{p.name}: {flip}" for flip in track.flips]
            _, status, reason = track.terminal
            reason_counts[reason] += 1
            message = ((succeeded_condition(track.last.get("status")) or {}).get("message")
                       or "")[:200] if track.last else ""
            why = None
            if reason == reasons.RECONCILER_RETRIES_EXHAUSTED:
                why = self._exhausted_wrongly(p.name, webhook, logs, budget, message)
            elif reason != p.expected and reason in TEKTON_POD_FAILURES:
                report.tekton_failed.append(
                    f"{p.name} ({p.kind}): TaskRun {tekton_says[p.name].get('reason')}: "
                    f"{str(tekton_says[p.name].get('message'))[:200]}")
            elif reason != p.expected:
                why = f"{reason} ({status}), expected {p.expected}: {message}"
            elif (status == "True") != (reason == reasons.SUCCEEDED):
                why = f"{reason} with status {status}"
            if why is None and (p.kind.startswith("user:") or p.kind == DOOMED) and (
                p.name in by_owner
            ):
                why = f"has TaskRun(s) {by_owner[p.name]} but should have none"
            if why is not None:
                report.wrong.append(f"{p.name} ({p.kind}): {why}")
        report.reasons = dict(reason_counts)

        verdicts = Counter(webhook.verdicts)
        exits = Counter(str(i.exit_code) for i in replicas.incarnations)
        report.faults = {
            "apiserver_restarts": len(self.apiserver_kills),
            "apiserver_down_mean": (sum(self.apiserver_down) / len(self.apiserver_down)
                                    if self.apiserver_down else 0.0),
            "apiserver_down_max": max(self.apiserver_down, default=0.0),
            "kills": len(self.kills),
            "kills_leader": sum(1 for k in self.kills if k[3]),
            "kills_by_signal": dict(Counter(k[2] for k in self.kills)),
            "incarnations": len(replicas.incarnations),
            "exit_codes": dict(exits),
            "label_patches": writer.patches,
            "label_patches_unfinished": writer.on_unfinished,
            "label_patches_failed": writer.failed,
            "apiserver_requests": dict(self.apiserver_counts),
            "apiserver_scrapes_missed": self.apiserver_scrapes_missed,
            "webhook_calls": webhook.calls,
            "webhook_verdicts": dict(verdicts),
            "soak_watch_errors": watch.watch_errors,
            "soak_watch_lists": watch.lists,
            "tekton_webhook_stops": len(self.tekton_webhook_down),
            "tekton_webhook_down_mean": (
                sum(d for _, d in self.tekton_webhook_down) / len(self.tekton_webhook_down)
                if self.tekton_webhook_down else 0.0),
            "tekton_controller_kills": len(self.tekton_controller_kills),
            "leader_stalls": len(self.leader_stalls),
            "leader_stalls_left": sum(1 for s in self.leader_stalls if s[2]),
            "leader_stalls_no_leader": self.leader_stalls_missed,
            "pods_with_fate": fates.calls,
        }
        report.peak_rss_mib = {str(slot): round(rss / 2**20, 1)
                               for slot, rss in replicas.peak_rss().items()}
        report.exhausted_mixed = self.exhausted_mixed
        self._retries(report, webhook, replicas, logs)

    def _exhausted_wrongly(self, name: str, webhook: AttributedWebhook,
                           logs: dict[Path, LogSummary], budget: int, message: str) -> str | None:
        """Why ReconcilerRetriesExhausted is wrong for `name`, or None if it is right.

        Right means: no webhook call for it was ever allowed (else its TaskRun exists and
        its outcome must be reported), and every process that gave up on it had first seen
        `budget` failed tries in a row (the first try and max-retries retries; in the NEW
        phase every try of a run without a TaskRun fails, so its count of failed tries is
        that run). Where the budget was spent partly on other system errors (an API server
        restart's 503s), the run is right by the controller's contract but not by the
        stricter "every webhook call failed, more than the budget" rule; those are listed
        in exhausted_mixed.
        """
        calls = webhook.by_buildrun.get(name, [])
        if "allow" in calls:
            return (f"ReconcilerRetriesExhausted although a webhook call was allowed (its TaskRun "
                    f"was created), calls {dict(Counter(calls))}: {message}")
        givers = [s.gave_up[name] for s in logs.values() if name in s.gave_up]
        if not givers:
            return f"ReconcilerRetriesExhausted, but no replica logged spending a budget: {message}"
        for tries in givers:
            if sum(tries.values()) < budget:
                return (f"gave up after {sum(tries.values())} failed tries {dict(tries)}, "
                        f"fewer than the budget of {budget}: {message}")
        if len(calls) < budget:
            self.exhausted_mixed.append(
                f"{name}: {len(calls)} failed webhook calls and the giving-up replica's tries "
                f"{dict(givers[0])}; last error: {message}")
        return None

    def _retries(self, report: Report, webhook: AttributedWebhook, replicas: ReplicaSet,
                 logs: dict[Path, LogSummary]) -> None:
        totals = replicas.totals()

        def counter(name: str, **labels: str) -> int:
            key: Sample = (name, tuple(sorted(labels.items())))
            return int(totals.get(key, 0))

        by_class = {dict(k[1])["error_class"]: int(v) for k, v in totals.items()
                    if k[0] == "buildrun_retries_total"}
        metric_total = sum(by_class.values())
        metric_webhook = by_class.get("webhook", 0)
        failures = sum(1 for v in webhook.verdicts if v != "allow")
        # Tekton's webhook stopped: the calls the API server failed, as it counted them.
        tekton_refused = (self.apiserver_counts["tekton_webhook_refused_creates"]
                          + self.apiserver_counts["taskrun_patch_500"])
        tekton_logged = sum(s.tekton_webhook_errors for s in logs.values())
        # Not a fault the soak injects: Tekton's webhook refusing a cancel patch on a
        # TaskRun it had just finished; the controller counts it as a webhook retry.
        tekton_refused_logged = sum(s.tekton_refused for s in logs.values())
        tekton_exhausting = sum(s.budget_spent_tekton for s in logs.values())

        logged = sum(s.webhook_errors for s in logs.values())
        exhausting = sum(s.budget_spent_webhook for s in logs.values())
        # Per process: webhook retries its log implies vs what its last scrape showed.
        after_scrape = 0
        after_scrape_by_end: Counter[str] = Counter()
        for inc in replicas.incarnations:
            s = logs[inc.log]
            scraped = inc.scrape.get(("buildrun_retries_total", (("error_class", "webhook"),)), 0)
            gap = (s.webhook_errors + s.tekton_webhook_errors + s.tekton_refused
                   - s.budget_spent_webhook - s.budget_spent_tekton) - int(scraped)
            after_scrape += gap
            if gap:
                after_scrape_by_end[inc.signal_sent or f"exit code {inc.exit_code}"] += gap

        # Failed calls no reconcile logged: match each to the logged try that made it, and
        # name what cut the others short (soak.accounting).
        calls, tries, cut = accounting.inputs(
            webhook.log, self.kills,
            [accounting.Process(i.slot, str(i.log), i.ended, bool(i.signal_sent))
             for i in replicas.incarnations],
            {str(k): v for k, v in logs.items()}, self.apiserver_kills,
            self.leader_stalls, self.wall_minus_monotonic)
        unlogged = accounting.unlogged_calls(calls, tries, cut)

        difference = failures + tekton_refused - metric_webhook
        explained = [
            f"{failures} calls to our flaky webhook failed ({dict(Counter(webhook.verdicts))} "
            f"of all calls) and the API server failed {tekton_refused} TaskRun creates and "
            "cancel patches on Tekton's stopped webhook (creates: "
            "apiserver_admission_webhook_rejection_count, calling_webhook_error; patches: "
            "apiserver_request_total PATCH taskruns 500; scraped before every restart); the "
            "replicas' logs show "
            f"{logged} and {tekton_logged} reconciles failing on them",
            f"- {exhausting + tekton_exhausting} of those spent a retry budget "
            f"({exhausting} and {tekton_exhausting}): by design the failure that exhausts "
            "the budget is not a retry (it hands over to give_up; "
            f"controller_retry_budget_exhausted_total, all classes: "
            f"{counter('controller_retry_budget_exhausted_total', controller='buildrun')})",
            f"- {after_scrape} webhook retries were counted by processes after their last scrape "
            f"(their logs show them), by how the process ended: {dict(after_scrape_by_end)}; a "
            "SIGTERMed replica finishes its in-flight reconciles after the scrape taken before "
            "the signal, anything else died before its next scrape",
            f"- {failures - logged} failed calls never reached a reconcile that logged it "
            f"(each failed call matched to the logged try that made it; "
            f"{sum(unlogged.by_cause.values())} left over): {unlogged.summary()}; "
            f"{unlogged.logged_without_call} logged webhook errors had no recorded call",
            f"- {tekton_refused - tekton_logged} failed calls to Tekton's webhook never "
            "reached a reconcile that logged it (the API server counts each call, with no "
            "time to match it to a replica end; a negative figure means logged failures the "
            f"API server's count missed: {self.apiserver_scrapes_missed} scrapes missed)",
            f"- -{tekton_refused_logged}: reconciles whose cancel patch Tekton's webhook "
            "refused (HTTP 400, the TaskRun was already complete), counted as webhook "
            "retries though no fault was injected",
            f"difference {difference} = {exhausting + tekton_exhausting} + {after_scrape} + "
            f"{failures - logged} + {tekton_refused - tekton_logged} - "
            f"{tekton_refused_logged} (the five lines above)",
            f"other classes in buildrun_retries_total are not webhook failures: "
            f"{ {k: v for k, v in by_class.items() if k != 'webhook'} } (API server restarts, "
            "conflicts left after _write_status' own 5 tries)",
        ]
        report.retries = {
            "metric_total": metric_total,
            "metric_by_class": by_class,
            "metric_webhook": metric_webhook,
            "webhook_failures": failures,
            "tekton_webhook_refused": tekton_refused,
            "tekton_webhook_logged": tekton_logged,
            "tekton_webhook_exhausting": tekton_exhausting,
            "tekton_refused_logged": tekton_refused_logged,
            "difference": difference,
            "logged_webhook_errors": logged,
            "budget_exhausting": exhausting,
            "counted_after_last_scrape": after_scrape,
            "counted_after_last_scrape_by_end": dict(after_scrape_by_end),
            "unlogged_failures": failures - logged,
            "unlogged_by_cause": dict(unlogged.by_cause),
            "unlogged_calls": [f"{c.at:.3f} {c.buildrun} {c.verdict}: {why} ({seen})"
                               for c, why, seen in unlogged.calls],
            "retry_budget_exhausted_total": counter("controller_retry_budget_exhausted_total",
                                                    controller="buildrun"),
            "buildrun_retry_exhausted_total": counter("buildrun_retry_exhausted_total"),
            "explained": explained,
        }
        tracebacks = [t for s in logs.values() for t in s.tracebacks]
        report.health = {
            "panics": counter("controller_runtime_reconcile_panics_total", controller="buildrun"),
            "tracebacks": len(tracebacks),
            "traceback_samples": tracebacks[:5],
            "fatal": sum(len(s.fatal) for s in logs.values()),
            "fatal_samples": [f for s in logs.values() for f in s.fatal][:5],
            "leadership_lost": sum(s.leadership_lost for s in logs.values()),
            "unstructured": sum(len(s.unstructured) for s in logs.values()),
            "unstructured_samples": [u for s in logs.values() for u in s.unstructured][:10],
            "reconciles": {dict(k[1])["result"]: int(v) for k, v in totals.items()
                           if k[0] == "controller_runtime_reconcile_total"},
        }


# What the API server itself counted, by (resource, subresource, verb, code).
_REQUESTS = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# Calls the API server failed per webhook: Tekton's, while the soak has it stopped.
_REJECTIONS = re.compile(
    r'^apiserver_admission_webhook_rejection_count\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)
WATCHED_REQUESTS = {
    "status_conflicts": ("buildruns", "status", "PUT", "409"),
    "taskrun_already_exists": ("taskruns", "", "POST", "409"),
    "taskrun_creates": ("taskruns", "", "POST", "201"),
    # Only the controller PATCHes TaskRuns (to cancel them; Tekton's controller writes
    # with PUT on status); a 500 there is Tekton's stopped webhook (the flaky one only
    # sees creates).
    "taskrun_patch_500": ("taskruns", "", "PATCH", "500"),
}


async def apiserver_requests(cluster: LocalCluster) -> Counter[str] | None:
    """apiserver_request_total for WATCHED_REQUESTS; None if the server did not answer."""
    headers = {"Authorization": f"Bearer {cluster.admin.token}"}
    async with aiohttp.ClientSession() as session:
        text = await get_text(session, cluster.url + "/metrics", timeout=10, headers=headers,
                              ssl=cluster.ssl_context())
    if text is None:
        return None
    wanted = {v: k for k, v in WATCHED_REQUESTS.items()}
    counts: Counter[str] = Counter()
    for m in _REQUESTS.finditer(text):
        labels = dict(_LABEL.findall(m["labels"]))
        key = (labels.get("resource", ""), labels.get("subresource", ""), labels.get("verb", ""),
               labels.get("code", ""))
        # Dry runs are the webhook's own readiness probes, not the controller's calls.
        if key in wanted and not labels.get("dry_run"):
            counts[wanted[key]] += int(float(m["value"]))
    for m in _REJECTIONS.finditer(text):
        labels = dict(_LABEL.findall(m["labels"]))
        if (TEKTON_WEBHOOK_MARKER in labels.get("name", "")
                and labels.get("operation") == "CREATE"
                and labels.get("error_type") == "calling_webhook_error"):
            counts["tekton_webhook_refused_creates"] += int(float(m["value"]))
    return counts


async def soak(cfg: Config, progress: Callable[[str], None] | None = None) -> Report:
    def _stderr(line: str) -> None:
        print(f"soak: {line}", file=sys.stderr, flush=True)
    return await Soak(cfg, progress or _stderr).run()


def parser() -> argparse.ArgumentParser:
    d = Config()
    p = argparse.ArgumentParser(prog="python -m soak.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--buildruns", type=int, default=d.buildruns)
    add("--seed", type=int, default=d.seed)
    add("--create-rate", type=float, default=d.create_rate, help="BuildRuns created per second")
    add("--user-errors", type=float, default=d.user_errors, help="fraction with a user error")
    add("--doomed", type=float, default=d.doomed,
        help="fraction whose every webhook call fails (must end ReconcilerRetriesExhausted)")
    add("--webhook-timeout", type=float, default=d.webhook_timeout,
        help="chance a webhook call times out")
    add("--webhook-error", type=float, default=d.webhook_error,
        help="chance a webhook call answers 500")
    add("--apiserver-restart-every", type=float, default=d.apiserver_restart_every,
        metavar="SECONDS", help="mean time between API server SIGKILL+restarts; 0: never")
    add("--kill-every", type=float, default=d.kill_every, metavar="SECONDS",
        help="mean time between replica kills; 0: never")
    add("--kill-leader", type=float, default=d.kill_leader)
    add("--sigkill", type=float, default=d.sigkill, help="chance a kill is SIGKILL, else SIGTERM")
    add("--conflict-rate", type=float, default=d.conflict_rate,
        help="label patches per second by a second writer; 0: none")
    add("--tekton-delay", type=float, nargs=2, default=d.tekton_delay, metavar=("MIN", "MAX"),
        help="seconds a pod stays Pending, and then Running (each drawn per pod)")
    add("--buildrun-timeout", default=d.buildrun_timeout,
        help="spec.timeout of the BuildRuns planned to time out (their pods hold)")
    add("--tekton-webhook-stop-every", type=float, default=d.tekton_webhook_stop_every,
        metavar="SECONDS", help="mean time between stops of Tekton's webhook; 0: never")
    add("--tekton-webhook-down", type=float, nargs=2, default=d.tekton_webhook_down,
        metavar=("MIN", "MAX"), help="seconds Tekton's webhook stays stopped")
    add("--tekton-controller-kill-every", type=float, default=d.tekton_controller_kill_every,
        metavar="SECONDS", help="mean time between SIGKILLs of Tekton's controller; 0: never")
    add("--leader-stall-every", type=float, default=d.leader_stall_every, metavar="SECONDS",
        help="mean time between stalls of the leader's proxy; 0: never")
    add("--leader-stall-seconds", type=float, default=d.leader_stall_seconds)
    add("--max-retries", type=int, default=d.max_retries)
    add("--chaos-seconds", type=float, default=d.chaos_seconds)
    add("--settle-seconds", type=float, default=d.settle_seconds)
    add("--timeout", type=float, default=d.timeout, help="bound on the whole soak")
    add("--workdir", type=Path, help="keep cluster data and replica logs here")
    add("--json", type=Path, help="also write the report as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cfg = Config(
        buildruns=args.buildruns, seed=args.seed, create_rate=args.create_rate,
        user_errors=args.user_errors, doomed=args.doomed,
        webhook_timeout=args.webhook_timeout, webhook_error=args.webhook_error,
        apiserver_restart_every=args.apiserver_restart_every, kill_every=args.kill_every,
        kill_leader=args.kill_leader, sigkill=args.sigkill, conflict_rate=args.conflict_rate,
        tekton_delay=tuple(args.tekton_delay), buildrun_timeout=args.buildrun_timeout,
        tekton_webhook_stop_every=args.tekton_webhook_stop_every,
        tekton_webhook_down=tuple(args.tekton_webhook_down),
        tekton_controller_kill_every=args.tekton_controller_kill_every,
        leader_stall_every=args.leader_stall_every,
        leader_stall_seconds=args.leader_stall_seconds, max_retries=args.max_retries,
        chaos_seconds=args.chaos_seconds, settle_seconds=args.settle_seconds,
        timeout=args.timeout, workdir=args.workdir,
    )
    started = format_time(now())
    try:
        report = asyncio.run(soak(cfg))
    except Exception as exc:
        print(f"soak: failed to run: {exc!r}", file=sys.stderr)
        return 2
    print(f"command: {' '.join(['python -m soak.run', *(argv or sys.argv[1:])])}")
    print(f"started: {started} on {platform.node()} ({platform.machine()})")
    print(report.text())
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

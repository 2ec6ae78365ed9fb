"""Fault soak: N BuildRuns through two controller replicas while the world misbehaves.

    .venv/bin/python -m soak.run --buildruns 500 --seed 1
    .venv/bin/python -m soak.run --buildruns 5000 --seed 7 --timeout 7200

It starts its own whole stack on loopback (devtools.cluster.stack.TektonStack: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kwok as the kubelet, and
Tekton's real webhook and controller), runs the controller as two
`python -m controller --leader-elect ...` subprocesses, each reaching the API server
through its own devtools.fakes.proxy.Proxy, and creates N BuildRuns (valid ones with a
planned pod outcome, which kwok plays out as devtools.fakes.fates tells it; user errors;
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
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import aiohttp

from controller.runtime.errors import is_already_exists
from controller.runtime.kube import ApiError, Kube, load_api_client
from controller.runtime.timestamps import format_time, now
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster, write_token_kubeconfig
from devtools.cluster.polling import wait_until
from devtools.cluster.stack import TektonStack
from devtools.fakes.fates import FateWebhook
from devtools.fakes.proxy import Proxy
from soak.actors import AttributedWebhook, SecondWriter, poisson
from soak.api import default_service_account, get_text, persist
from soak.cli import print_run_header, progress_on_stderr
from soak.judge import Evidence, Recorder, Report, Timeline, judge
from soak.plan import NS, Config, Plan, Planned
from soak.replicas import TEKTON_WEBHOOK_MARKER, ReplicaSet
from soak.watch import Follower

# Tekton's knative client defaults to 5 QPS (Tekton doubles it, twice) and 2 workers
# per reconciler: too few for thousands of TaskRuns on one node (a first 5000 run with
# them made 264 pods in 322 s while 1129 BuildRuns had been created). The soak gives
# Tekton's controller this instead.
TEKTON_CONTROLLER_ENV = {"KUBE_API_QPS": "50", "KUBE_API_BURST": "100",
                         "THREADS_PER_CONTROLLER": "16"}


class Soak:
    """One run of the fault soak: its stack, replicas and faults, as `cfg` says."""

    def __init__(self, cfg: Config, progress: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.progress = progress
        self.plan = Plan(cfg)
        self.recorder = Recorder()
        self.created: list[str] = []
        self.timeline = Timeline(wall_minus_monotonic=time.time() - time.monotonic())

    def unfinished(self) -> list[str]:
        return [n for n in self.created if not self.recorder.done(n)]

    def all_done(self) -> bool:
        return len(self.created) == len(self.plan.runs) and not self.unfinished()

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
                webhook = AttributedWebhook(cluster, NS, self.plan.verdict)
                # The soak's own loop answers it while busy: allow more than the 5 s default
                # (a slow answer would fail the pod create, and Tekton the TaskRun).
                fates = FateWebhook(cluster, self.plan.fate, timeout_seconds=15)
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

        tasks = []
        for p in self.plan.runs:
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
                self.timeline.apiserver_kills.append(t)
                await cluster.restart_apiserver()
                self.timeline.apiserver_down.append(time.monotonic() - t)

            async def kill() -> None:
                leader = replicas.leader()
                victim = await replicas.kill(prefer_leader=cfg.kill_leader, sigkill=cfg.sigkill)
                if victim is not None:
                    self.timeline.kills.append((time.monotonic(), victim.slot,
                                                str(victim.signal_sent), victim is leader))

            down_rng = random.Random(f"{cfg.seed}:tekton-webhook-down")

            async def tekton_webhook_outage() -> None:
                t = time.monotonic()
                stack.tekton.stop_webhook()
                down = down_rng.uniform(*cfg.tekton_webhook_down)
                await asyncio.sleep(down)
                stack.tekton.start_webhook()  # serving again about a second later
                self.timeline.tekton_webhook_down.append((t, down))

            async def tekton_controller_kill() -> None:
                self.timeline.tekton_controller_kills.append(time.monotonic())
                stack.tekton.stop_controller()
                await asyncio.sleep(0.5)
                stack.tekton.start_controller()

            async def leader_stall() -> None:
                # Right after a kill there may be none: wait a while for the next one.
                leader = await wait_until(replicas.leader, 15, 0.5)
                if leader is None:
                    self.timeline.leader_stalls_missed += 1
                    return
                proxy = proxies[leader.slot]
                t = time.monotonic()
                proxy.stall()
                await asyncio.sleep(cfg.leader_stall_seconds)
                left = not leader.alive  # bounded renewal: it exits before the lease ends
                proxy.resume()
                self.timeline.leader_stalls.append((t, leader.slot, left))

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
                stack.tekton.start_webhook()
                stack.tekton.start_controller()
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
        judge(report, Evidence(self.plan, self.recorder, len(self.created), self.timeline,
                               taskruns, webhook, fates.calls, replicas, writer, buildrun_watch))
        report.health["stack"] = stack_health
        (workdir / "timeline.json").write_text(json.dumps({
            "wall_minus_monotonic": self.timeline.wall_minus_monotonic,
            "webhook_calls": webhook.log,
            "replica_kills": self.timeline.kills,
            "apiserver_kills": self.timeline.apiserver_kills,
            "apiserver_down": self.timeline.apiserver_down,
            "tekton_webhook_down": self.timeline.tekton_webhook_down,
            "tekton_controller_kills": self.timeline.tekton_controller_kills,
            "leader_stalls": self.timeline.leader_stalls,
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
            self.timeline.apiserver_counts.update(counts)
        else:
            self.timeline.apiserver_scrapes_missed += 1

    async def _report_progress(self, replicas: ReplicaSet, fates: FateWebhook,
                               webhook: AttributedWebhook) -> None:
        t0 = time.monotonic()
        while True:
            await asyncio.sleep(10)
            leader = replicas.leader()
            self.progress(
                f"t={time.monotonic() - t0:.0f}s created {len(self.created)}/{len(self.plan.runs)} "
                f"finished {len(self.created) - len(self.unfinished())} "
                f"pods {fates.calls} "
                f"restarts {len(self.timeline.apiserver_kills)} kills {len(self.timeline.kills)} "
                f"tekton webhook stops {len(self.timeline.tekton_webhook_down)} "
                f"tekton controller kills {len(self.timeline.tekton_controller_kills)} "
                f"leader stalls {len(self.timeline.leader_stalls)} "
                f"webhook calls {webhook.calls} "
                f"leader {f'slot {leader.slot}' if leader else 'none'}"
            )

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
    return await Soak(cfg, progress or progress_on_stderr("soak")).run()


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
    print_run_header("soak.run", argv, started)
    print(report.text())
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

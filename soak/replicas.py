"""Controller replicas as real subprocesses: started, killed, restarted, scraped.

Each replica slot runs `python -m controller ...` again and again, each slot with its
own kubeconfig (the soak points each at its own proxy, so one replica can be cut off);
every run is an Incarnation with its own log file and metrics port. Counters die with
the process, so they are scraped every second and right before every kill we
make, and the last scrape of each incarnation is what the soak adds up. What
an incarnation counted after its last scrape is lost; the report says how
much, using the incarnation's own log, which survives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from devtools.cluster.localcluster import REPO, free_port
from devtools.cluster.processes import die_with_parent
from soak.api import get_text

LEASE_NAME = "buildrun-controller"

# Counters the soak sums over incarnations, by sample name; labels kept as given.
COUNTERS = (
    "buildrun_retries_total",
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_panics_total",
    "controller_retry_budget_exhausted_total",
    "buildrun_retry_exhausted_total",
    "buildrun_completed_total",
    "informer_watch_restarts_total",
    "informer_relists_total",
)

# How kube-apiserver words a failed webhook call (the controller's own markers).
WEBHOOK_MARKERS = ("failed calling webhook", "admission webhook")
# Tekton's own webhooks (webhook.pipeline.tekton.dev, validation.webhook.pipeline...):
# failing calls to them are the soak's "Tekton webhook stopped" fault, counted apart.
TEKTON_WEBHOOK_MARKER = "pipeline.tekton.dev"
RSS = "process_resident_memory_bytes"

Sample = tuple[str, tuple[tuple[str, str], ...]]


def parse_metrics(text: str) -> dict[Sample, float]:
    samples: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in COUNTERS or s.name in ("leader_election_master_status", RSS):
                samples[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return samples


@dataclass
class LogSummary:
    """What one incarnation's JSON log says it did."""

    webhook_errors: int = 0  # reconciles that failed on a call to the flaky webhook
    webhook_by_name: Counter[str] = field(default_factory=Counter)  # ... by BuildRun name
    tekton_webhook_errors: int = 0  # ... on a call to Tekton's (stopped) webhook
    # ... because Tekton's webhook refused the call (HTTP 400: a cancel patch on a TaskRun
    # Tekton had just finished, "Once the TaskRun is complete, no updates are allowed")
    tekton_refused: int = 0
    # Failed reconciles by BuildRun name, "webhook", "tekton-webhook" or "other" (any
    # other system error).
    errors_by_name: dict[str, Counter[str]] = field(default_factory=dict)
    # Every failed reconcile, in log order: (BuildRun name, kind as in errors_by_name, when it
    # began and ended in wall-clock seconds, from the log line's ts and duration).
    failures: list[tuple[str, str, float, float]] = field(default_factory=list)
    lease_lost_at: list[float] = field(default_factory=list)  # wall clock, "stopping at once"
    # Names whose retry budget this process spent, with their failed tries up to then
    # (the try that spent it included), by class as above.
    gave_up: dict[str, Counter[str]] = field(default_factory=dict)
    other_errors: Counter[str] = field(default_factory=Counter)
    budget_spent: int = 0
    budget_spent_webhook: int = 0
    budget_spent_tekton: int = 0
    leadership_lost: int = 0
    fatal: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    unstructured: list[str] = field(default_factory=list)


def summarize_log(path: Path) -> LogSummary:
    out = LogSummary()
    if not path.exists():
        return out
    for raw in path.read_bytes().splitlines():
        if not raw.strip():
            continue
        try:
            entry = orjson.loads(raw)
        except orjson.JSONDecodeError:
            out.unstructured.append(raw.decode(errors="replace")[:300])
            continue
        if not isinstance(entry, dict):
            continue
        msg = entry.get("msg")
        error = str(entry.get("error") or "")
        webhook = any(m in error.lower() for m in WEBHOOK_MARKERS)
        tekton = webhook and TEKTON_WEBHOOK_MARKER in error
        refused = tekton and "denied the request" in error
        tekton = tekton and not refused
        webhook = webhook and not (tekton or refused)
        kind = ("webhook" if webhook else "tekton-webhook" if tekton
                else "tekton-refused" if refused else "other")
        name = str(entry.get("key") or "").rpartition("/")[2]
        ts = entry.get("ts")
        if msg == "reconciled" and entry.get("result") == "error":
            out.errors_by_name.setdefault(name, Counter())[kind] += 1
            if isinstance(ts, (int, float)):
                duration = entry.get("duration")
                took = float(duration) if isinstance(duration, (int, float)) else 0.0
                out.failures.append((name, kind, float(ts) - took, float(ts)))
            if webhook:
                out.webhook_errors += 1
                out.webhook_by_name[name] += 1
            elif tekton:
                out.tekton_webhook_errors += 1
            elif refused:
                out.tekton_refused += 1
            else:
                out.other_errors[error.split(":")[0][:60]] += 1
        elif msg == "retry budget spent, giving up":
            # Logged while handling the failed try that spent the budget, before its own
            # "reconciled" line: count that try in.
            tries = Counter(out.errors_by_name.get(name, Counter()))
            tries[kind] += 1
            out.gave_up.setdefault(name, tries)
            out.budget_spent += 1
            out.budget_spent_webhook += webhook
            out.budget_spent_tekton += tekton or refused
        elif msg == "leader election lost, stopping at once":
            out.leadership_lost += 1
            if isinstance(ts, (int, float)):
                out.lease_lost_at.append(float(ts))
        elif msg == "stopping after a fatal error":
            out.fatal.append(error[:300])
        if "traceback" in entry:
            out.tracebacks.append(f"{msg}: {str(entry['traceback'])[-600:]}")
    return out


@dataclass
class Incarnation:
    slot: int
    number: int
    log: Path
    metrics_port: int
    probe_port: int
    started: float
    process: asyncio.subprocess.Process | None = None
    scrape: dict[Sample, float] = field(default_factory=dict)
    scraped_at: float | None = None
    peak_rss: float = 0.0  # the largest process_resident_memory_bytes scraped
    ended: float | None = None
    exit_code: int | None = None
    signal_sent: str | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def is_leader(self) -> bool:
        key: Sample = ("leader_election_master_status", (("name", LEASE_NAME),))
        return self.alive and self.scrape.get(key) == 1.0

    async def fetch_metrics(self, session: aiohttp.ClientSession) -> bool:
        if not self.alive:
            return False
        text = await get_text(session, f"http://127.0.0.1:{self.metrics_port}/metrics",
                              timeout=3)
        if text is None:
            return False
        self.scrape = parse_metrics(text)
        self.scraped_at = time.monotonic()
        self.peak_rss = max(self.peak_rss, self.scrape.get((RSS, ()), 0.0))
        return True


class ReplicaSet:
    """`size` slots of the controller; a slot whose process ends is started again."""

    def __init__(self, kubeconfigs: list[Path], workdir: Path, *, max_retries: int,
                 rng: random.Random, restart_delay: tuple[float, float] = (0.5, 3.0),
                 env: Mapping[str, str] | None = None) -> None:
        """One slot per kubeconfig in `kubeconfigs`; `env` adds to each process's
        environment (ours), e.g. the step images a real node names
        (RealNode.images.shipwright_env())."""
        self.kubeconfigs = kubeconfigs
        self.env = {**os.environ, **env} if env else None
        size = len(kubeconfigs)
        self.workdir = workdir
        self.size = size
        self.max_retries = max_retries
        self.rng = rng
        self.restart_delay = restart_delay
        self.incarnations: list[Incarnation] = []
        self.current: dict[int, Incarnation] = {}
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None

    def argv(self, slot: int, metrics_port: int, probe_port: int) -> list[str]:
        return [
            sys.executable, "-m", "controller",
            "--kubeconfig", str(self.kubeconfigs[slot]),
            "--leader-elect", "--leader-election-namespace", "default",
            "--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5",
            "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{probe_port}",
            "--backoff-base-delay", "0.05", "--backoff-max-delay", "2",
            "--max-retries", str(self.max_retries),
            "--log-format", "json",
        ]

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        self._tasks = [asyncio.create_task(self._supervise(slot), name=f"replica-{slot}")
                       for slot in range(self.size)]
        self._tasks.append(asyncio.create_task(self._scrape_loop(), name="scraper"))

    async def _spawn(self, slot: int) -> Incarnation:
        number = sum(1 for i in self.incarnations if i.slot == slot)
        inc = Incarnation(slot, number, self.workdir / f"replica-{slot}-{number:03d}.log",
                          free_port(), free_port(), time.monotonic())
        with inc.log.open("wb") as log:
            inc.process = await asyncio.create_subprocess_exec(
                *self.argv(slot, inc.metrics_port, inc.probe_port),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                cwd=REPO, env=self.env, preexec_fn=die_with_parent,
            )
        self.incarnations.append(inc)
        self.current[slot] = inc
        return inc

    async def _supervise(self, slot: int) -> None:
        while not self._stopping:
            inc = await self._spawn(slot)
            assert inc.process is not None
            inc.exit_code = await inc.process.wait()
            inc.ended = time.monotonic()
            if self._stopping:
                return
            await asyncio.sleep(self.rng.uniform(*self.restart_delay))

    async def _scrape_loop(self) -> None:
        while True:
            await self.scrape_all()
            await asyncio.sleep(1.0)

    async def scrape_all(self) -> None:
        assert self._session is not None
        live = [i for i in self.current.values() if i.alive]
        await asyncio.gather(*(i.fetch_metrics(self._session) for i in live))

    def leader(self) -> Incarnation | None:
        return next((i for i in self.current.values() if i.is_leader()), None)

    async def wait_leader(self, timeout: float) -> Incarnation:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await self.scrape_all()
            leader = self.leader()
            if leader is not None:
                return leader
            await asyncio.sleep(0.5)
        logs = "\n".join(i.log.read_text(errors="replace")[-1500:] for i in self.incarnations)
        raise TimeoutError(f"no replica became leader within {timeout}s:\n{logs}")

    async def kill(self, *, prefer_leader: float, sigkill: float) -> Incarnation | None:
        """Signals one live replica (the leader with probability `prefer_leader`),
        right after scraping it so its counters are kept."""
        await self.scrape_all()
        live = [i for i in self.current.values() if i.alive]
        if not live:
            return None
        leader = self.leader()
        victim = leader if leader is not None and self.rng.random() < prefer_leader else (
            self.rng.choice(live))
        assert self._session is not None and victim.process is not None
        await victim.fetch_metrics(self._session)
        sig = signal.SIGKILL if self.rng.random() < sigkill else signal.SIGTERM
        victim.signal_sent = sig.name
        with contextlib.suppress(ProcessLookupError):
            victim.process.send_signal(sig)
        return victim

    async def all_running(self, timeout: float) -> None:
        """Waits until every slot has a live, scrapeable process."""
        assert self._session is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [i for i in self.current.values() if i.alive]
            if len(live) == self.size and all(
                [await i.fetch_metrics(self._session) for i in live]
            ):
                return
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        """Final scrape, then SIGTERM (the Deployment's way) and wait; SIGKILL if stuck."""
        await self.scrape_all()
        self._stopping = True
        for inc in self.current.values():
            if inc.alive and inc.process is not None:
                inc.signal_sent = "SIGTERM at the end"
                with contextlib.suppress(ProcessLookupError):
                    inc.process.send_signal(signal.SIGTERM)
        for inc in self.current.values():
            if inc.process is not None and inc.process.returncode is None:
                try:
                    await asyncio.wait_for(inc.process.wait(), 45)
                except TimeoutError:
                    inc.process.kill()
                    await inc.process.wait()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for inc in self.incarnations:
            if inc.process is not None and inc.exit_code is None:
                inc.exit_code = inc.process.returncode
                inc.ended = inc.ended or time.monotonic()
        if self._session is not None:
            await self._session.close()

    def peak_rss(self) -> dict[int, float]:
        """Each slot's largest scraped resident set size (bytes), over its processes."""
        out: dict[int, float] = {}
        for inc in self.incarnations:
            out[inc.slot] = max(out.get(inc.slot, 0.0), inc.peak_rss)
        return out

    def totals(self) -> dict[Sample, float]:
        """Every counter summed over incarnations, each at its last scrape."""
        total: dict[Sample, float] = {}
        for inc in self.incarnations:
            for key, value in inc.scrape.items():
                if key[0] in COUNTERS:
                    total[key] = total.get(key, 0.0) + value
        return total

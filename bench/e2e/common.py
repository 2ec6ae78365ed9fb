"""What the end-to-end benchmarks share.

- `machine()`: nproc, CPU model, Python, `date -u`, load average, for the record;
  `summary()`, `per_buildrun_ms()`, `requests_text()`: the figures' latency percentiles,
  CPU per BuildRun and requests per BuildRun as the tables print them.
- `Controller`: `python -m controller ...` as a subprocess on loopback ports, with its
  CPU (utime+stime from /proc/<pid>/stat), RSS and peak RSS (VmRSS/VmHWM from
  /proc/<pid>/status), /healthz and /readyz timing, and /metrics scrapes.
- `start_py_spy()`/`stop_py_spy()`: a py-spy profile of the controller over a phase.
- `CpuMeter`: CPU seconds of the controller, kube-apiserver, etcd and this process.
- `Observer`: the benchmark's own watch on BuildRuns, separate from the controller's,
  recording when each BuildRun first showed status.taskRunName and completionTime.
- `bounded()`: a fixed number of coroutines working through a list, with a deadline.
- `warm_up()`: one BuildRun (WARMUP) through the whole cycle before the measured ones.

Every wait here is bounded by a deadline; every loop by its input's length.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client.parser import text_string_to_metric_families

from controller.runtime.kube import JSON, Kube
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster, free_port
from devtools.cluster.polling import transient
from devtools.cluster.processes import command_lines, die_with_parent
from devtools.fakes.tekton import TektonStatusWriter
from devtools.hack import REPO

NS = "bench"
WARMUP = "warmup"  # the warm-up BuildRun's name (the measured ones are br-NNNNNN)
RESULTS = REPO / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the record ------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip()
                  for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    date = subprocess.run(["date", "-u"], capture_output=True, text=True, check=False)
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": date.stdout.strip(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def command_line() -> str:
    return " ".join([".venv/bin/python -m " + (sys.modules["__main__"].__spec__.name
                                               if sys.modules["__main__"].__spec__ else
                                               sys.argv[0]), *sys.argv[1:]])


def write_results(kind: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"e2e-{kind}-{stamp}.json"
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    return path


def report(kind: str, info: dict[str, Any], runs: list[dict[str, Any]], *tables: str) -> None:
    """A benchmark's closing lines: the machine (as it was at the start, `info`), the
    command, its tables (a blank line between), and where its raw figures were written
    (write_results, with the load at the end)."""
    print()
    print(f"machine: {info}")
    print(f"command: {command_line()}")
    print("\n\n".join(tables))
    path = write_results(kind, {"machine": info, "command": command_line(), "runs": runs,
                                "end_load": machine()["loadavg"]})
    print(f"raw: {path}")


def percentile(values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); nan when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _cpu_times() -> tuple[int, int]:
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]  # idle + iowait
    return sum(parts), idle


async def wait_quiet(busy_below: float = 0.10, max_wait: float = 300.0) -> dict[str, Any]:
    """Waits (at most max_wait) until the whole machine was at most `busy_below` busy
    over 2 s, i.e. nothing else (other engineers' test runs) is loading it, and, if
    $E2E_MAX_LOAD is set, until the 1-minute load average is below it. Returns the
    busy fraction seen and the load averages at that moment, for the record."""
    deadline = time.monotonic() + max_wait
    max_load = float(os.environ.get("E2E_MAX_LOAD", "inf"))
    while True:
        t0, i0 = _cpu_times()
        await asyncio.sleep(2.0)
        t1, i1 = _cpu_times()
        busy = 1.0 - (i1 - i0) / max(t1 - t0, 1)
        quiet = busy <= busy_below and os.getloadavg()[0] < max_load
        if quiet or time.monotonic() > deadline:
            return {"busy_2s": round(busy, 3), "loadavg": [round(x, 2) for x in os.getloadavg()],
                    "waited_out": not quiet}


def add_tekton_env_option(p: argparse.ArgumentParser) -> None:
    """`--tekton-env KEY=VALUE...`: more environment for Tekton's controller, as a cluster
    admin tunes it (docs/tekton-controller-performance-configuration.md); read it with
    `tekton_env(args)`."""
    p.add_argument("--tekton-env", nargs="*", default=[], metavar="KEY=VALUE",
                   help="more environment for Tekton's controller, e.g. KUBE_API_QPS=50 "
                   "KUBE_API_BURST=100 THREADS_PER_CONTROLLER=16 (its client-side limits, "
                   "which Tekton doubles, and its workers); default: Tekton's own")


def tekton_env(args: argparse.Namespace) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in args.tekton_env)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def summary(latencies: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(latencies, 50), 3), "p90": round(percentile(latencies, 90), 3),
            "p99": round(percentile(latencies, 99), 3), "max": round(max(latencies), 3)}


# The speed probe's work: a TaskRun-sized JSON document, encoded and decoded, and a loop of
# integer arithmetic, in this process's one thread.
_PROBE_DOC = {"spec": {"steps": [{"name": f"step-{i}", "args": ["--flag", "x" * 40] * 4,
                                  "env": [{"name": f"E{j}", "value": "v" * 20}
                                          for j in range(6)]} for i in range(8)]}}


def speed_probe(rounds: int = 3) -> float:
    """The machine's speed at this moment, as the fewest ms of this thread's CPU that a
    fixed piece of work took in `rounds` tries (lower: faster). The host's speed moves
    under a VM (its other guests, its clock): the same 5,000 starts of `--mode watched`
    cost this script 18 % less CPU and the API server 11 % less in one run than in the
    same mode's run 7 minutes before (2026-12-07 00:47-00:56 UTC, BENCHMARKS-journal.md),
    with `others` and `steal` near nothing; a probe before and after each run shows it."""
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        for _ in range(600):
            orjson.loads(orjson.dumps(_PROBE_DOC))
        acc = 0
        for i in range(600_000):
            acc += i * i % 7
        best = min(best, time.thread_time() - t)
    return round(1000 * best, 2)


async def apiserver_pprof(cluster: LocalCluster, label: str, *, seconds: int = 0) -> str:
    """A Go pprof profile of kube-apiserver (started with --profiling=true): its CPU over
    the next `seconds`, or with none its heap as it is now (in-use and allocated bytes by
    stack). Saved under bench/results/; read it with `go tool pprof -top <file>` (a heap:
    `-sample_index=inuse_space`)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    kind = "pprof" if seconds else "heap"
    path = RESULTS / f"e2e-apiserver-{kind}-{label}-{time.strftime('%Y%m%dT%H%M%S')}.pb.gz"
    path.write_bytes(await apiserver_get(
        cluster, f"/debug/pprof/profile?seconds={seconds}" if seconds else "/debug/pprof/heap",
        timeout=seconds + 60))
    return str(path)


async def apiserver_get(cluster: LocalCluster, path: str, *, timeout: float = 30) -> bytes:
    """GET `path` (with its query) of the cluster's kube-apiserver as admin: its metrics,
    its pprof endpoints."""
    headers = {"Authorization": f"Bearer {cluster.admin.token}"}
    async with aiohttp.ClientSession() as session, session.get(
        cluster.url + path, headers=headers, ssl=cluster.ssl_context(),
        timeout=aiohttp.ClientTimeout(total=timeout),
    ) as resp:
        resp.raise_for_status()
        return await resp.read()


def per_buildrun_ms(cpu: dict[str, float], n: int) -> dict[str, float]:
    """CPU ms per BuildRun of each process measured (not wall, not cores busy)."""
    return {k: round(1000 * v / n, 3) for k, v in cpu.items()
            if k not in ("wall", "cores_busy", "others", "steal")}


def outcomes_text(outcomes: dict[str, int]) -> str:
    """BuildRuns by their Succeeded condition (`outcomes()`), for a table cell."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items()))


def requests_text(requests: dict[str, float]) -> str:
    """"POST taskruns 1, PUT buildruns/status 1, ...", largest first."""
    return ", ".join(f"{k} {v:g}" for k, v in sorted(requests.items(), key=lambda kv: -kv[1]))


# -- processes ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Usage:
    cpu: float  # user + system CPU seconds
    rss_kib: int
    hwm_kib: int  # peak RSS


def usage(pid: int) -> Usage:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # After the command name: field 3 (state) is fields[0]; utime is 14, stime 15.
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    rss = hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return Usage(cpu, rss, hwm)


def pid_with_arg(arg: str) -> int | None:
    """The process whose command line has exactly this argument (the cluster's servers)."""
    want = arg.encode()
    return next((pid for pid, argv in command_lines() if want in argv), None)


def server_pids(cluster: LocalCluster) -> dict[str, int]:
    pids = {"apiserver": pid_with_arg(f"--secure-port={cluster.port}"),
            "etcd": pid_with_arg(f"--listen-client-urls={cluster.etcd_url}")}
    return {k: v for k, v in pids.items() if v is not None}


def _machine_ticks() -> tuple[int, int]:
    """(busy, steal) clock ticks of the whole machine so far, from /proc/stat: busy is
    user+nice+system+irq+softirq (every process, ours and anyone else's), steal the time
    the hypervisor ran another guest while this one wanted a CPU."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = parts[:8]
    return user + nice + system + irq + softirq, steal


class CpuMeter:
    """CPU seconds per named process between `start()` and `stop()`, and of the whole
    machine: what other processes used (`others`: every engineer's work but this run's)
    and the hypervisor's steal, so a slow run can be told from a busy or slowed machine."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self._t0 = 0.0
        self._start: dict[str, float] = {}
        self._ticks = (0, 0)

    def _now(self) -> dict[str, float]:
        out = {}
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                out[name] = usage(pid).cpu
        return out

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._start = self._now()
        self._ticks = _machine_ticks()

    def stop(self) -> dict[str, float]:
        """CPU seconds each used, plus 'wall', 'cores busy' ((sum of ours) / wall), and of
        the machine in the same time: 'others' (CPU seconds of every other process) and
        'steal' (seconds the hypervisor took)."""
        wall = time.monotonic() - self._t0
        now = self._now()
        busy, steal = _machine_ticks()
        out = {k: round(now[k] - self._start[k], 2) for k in now if k in self._start}
        ours = sum(out.values())
        out["wall"] = round(wall, 2)
        out["cores_busy"] = round(ours / wall, 2)
        out["others"] = round((busy - self._ticks[0]) / CLK_TCK - ours, 2)
        out["steal"] = round((steal - self._ticks[1]) / CLK_TCK, 2)
        return out


class Controller:
    """`python -m controller` against `kubeconfig`, watching every namespace, no leader
    election (one replica), logging at warning in JSON to `log_path`. (bench.e2e.peer
    runs Shipwright's controller through a subclass.)"""

    # controller_runtime_reconcile_total's `controller` label for BuildRuns.
    reconciler = "buildrun"

    def __init__(self, kubeconfig: Path, log_path: Path, *, workers: int,
                 extra: Iterable[str] = (), cwd: Path | None = None) -> None:
        # `cwd`: another checkout of the controller to run (python -m imports it from
        # there first), for before/after comparisons.
        self.cwd = cwd or REPO
        self.metrics_port, self.probe_port = free_port(), free_port()
        self.log_path = log_path
        self.argv = [
            sys.executable, "-m", "controller",
            "--kubeconfig", str(kubeconfig),
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{self.probe_port}",
            "--max-concurrent-reconciles", str(workers),
            "--log-level", "warning", "--log-format", "json",
            *extra,
        ]
        self.env: dict[str, str] | None = None  # None: inherit ours
        self.process: asyncio.subprocess.Process | None = None
        self.started = 0.0
        self._session: aiohttp.ClientSession | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        with self.log_path.open("ab") as out:
            self.started = time.monotonic()
            self.process = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.STDOUT, cwd=self.cwd, env=self.env,
                preexec_fn=die_with_parent,
            )

    def check_alive(self) -> None:
        if self.process is None or self.process.returncode is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"controller exited: {tail}")

    async def _status(self, port: int, path: str) -> int | None:
        assert self._session is not None
        try:
            async with self._session.get(f"http://127.0.0.1:{port}{path}") as resp:
                await resp.read()
                return resp.status
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None

    async def wait_ready(self, timeout: float = 600.0) -> tuple[float, float]:
        """Seconds from spawn to /healthz 200 (imported, serving) and to /readyz 200
        (every informer listed: caches synced)."""
        deadline = time.monotonic() + timeout
        live = None
        while time.monotonic() < deadline:
            self.check_alive()
            if live is None and await self._status(self.probe_port, "/healthz") == 200:
                live = time.monotonic() - self.started
            if live is not None and await self._status(self.probe_port, "/readyz") == 200:
                return live, time.monotonic() - self.started
            await asyncio.sleep(0.02)
        raise TimeoutError(f"controller not ready after {timeout}s")

    async def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        assert self._session is not None
        async with self._session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as resp:
            text = await resp.text()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
        return out

    async def reconciles(self) -> dict[str, int]:
        """controller_runtime_reconcile_total{controller=<reconciler>} by result."""
        samples = await self.scrape()
        return {dict(k[1])["result"]: int(v) for k, v in samples.items()
                if k[0] == "controller_runtime_reconcile_total"
                and dict(k[1]).get("controller") == self.reconciler}

    async def events_dropped(self) -> int:
        """controller_events_dropped_total, all causes."""
        samples = await self.scrape()
        return int(sum(v for k, v in samples.items()
                       if k[0] == "controller_events_dropped_total"))

    async def settled_reconciles(self, deadline: float) -> dict[str, int]:
        """The reconcile counts once they have not moved for 2 s (or at the deadline,
        monotonic): what a start costs, now that a finished BuildRun needing nothing
        costs no reconcile (issue 34), so there is no count to wait for."""
        last: dict[str, int] | None = None
        still_since = time.monotonic()
        while time.monotonic() < deadline:
            self.check_alive()
            counts = await self.reconciles()
            if counts != last:
                last, still_since = counts, time.monotonic()
            elif time.monotonic() - still_since >= 2.0:
                break
            await asyncio.sleep(0.25)
        return last or {}

    def usage(self) -> Usage:
        return usage(self.pid)

    async def stop(self) -> int | None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 40)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self._session is not None:
            await self._session.close()
        return self.process.returncode if self.process else None


class Watchers(Controller):
    """bench.e2e.watchers (every watch our controller holds, nothing else of it; with
    `writers`, the controller's start writes too) as a benchmark's subprocess, in a
    controller's place: started, awaited at /readyz and stopped as one."""

    def __init__(self, kubeconfig: Path, log_path: Path, *, writers: int = 0) -> None:
        super().__init__(kubeconfig, log_path, workers=0)
        self.probe_port = free_port()
        self.argv = [sys.executable, "-m", "bench.e2e.watchers", "--kubeconfig",
                     str(kubeconfig), "--health-probe-bind-address",
                     f"127.0.0.1:{self.probe_port}", "--writers", str(writers)]


async def start_py_spy(pid: int, label: str, *,
                       timeline: bool = False) -> tuple[asyncio.subprocess.Process, Path]:
    """py-spy record on the controller (sampling, non-blocking) until stop_py_spy: collapsed
    stacks, or with `timeline` every sample in order, idle ones too (speedscope JSON:
    each sample's stack and weight, so where a moment's time went can be read off)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = ".speedscope.json" if timeline else ".txt"
    path = RESULTS / f"e2e-py-spy-{label}-{time.strftime('%Y%m%dT%H%M%S')}{suffix}"
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
        "--format", "speedscope" if timeline else "raw", *(["--idle"] if timeline else []),
        "--rate", "200", "--nonblocking", "--output", str(path),
        "--duration", "600", stdout=asyncio.subprocess.DEVNULL,
        stderr=path.with_suffix(".log").open("wb"))
    await asyncio.sleep(0.5)  # attached
    return proc, path


async def stop_py_spy(spy: tuple[asyncio.subprocess.Process, Path]) -> str:
    proc, path = spy
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
    return str(path)


# -- API work ----------------------------------------------------------------------------

@dataclass
class Bounded:
    """What `bounded()` did: per item, when its call returned; and transient retries."""

    done_at: dict[str, float] = field(default_factory=dict)
    retries: int = 0
    seconds: float = 0.0


async def bounded(names: Sequence[str], call: Callable[[str], Awaitable[object]], *,
                  concurrency: int, deadline: float, tries: int = 5) -> Bounded:
    """`call(name)` for every name, `concurrency` at a time. A transient error (429, 5xx,
    connection) is tried again, at most `tries` times; past `deadline` it raises."""
    result = Bounded()
    todo = iter(names)
    t0 = time.monotonic()

    async def worker() -> None:
        for name in todo:
            for attempt in range(tries):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"deadline passed with {len(result.done_at)} done")
                try:
                    await call(name)
                    break
                except Exception as exc:
                    if not transient(exc) or attempt == tries - 1:
                        raise
                    result.retries += 1
                    await asyncio.sleep(0.05 * 2 ** attempt)
            result.done_at[name] = time.monotonic()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.seconds = time.monotonic() - t0
    return result


class Observer:
    """The benchmark's own list+watch of BuildRuns in one namespace (its own connection).

    Records, by name, the monotonic time each BuildRun first showed status.taskRunName
    (and which), and first showed status.completionTime.
    """

    # The resource watched (a subclass may watch another, overriding `_see`).
    group_version, plural = "shipwright.io/v1beta1", "buildruns"

    def __init__(self, cluster: LocalCluster, namespace: str = NS, *,
                 field_selector: str = "") -> None:
        self.cluster = cluster
        self.namespace = namespace
        # e.g. "metadata.name=x": list and watch that one object (bench.e2e.restart).
        self.field_selector = field_selector
        self.taskrun_at: dict[str, float] = {}
        self.taskrun_name: dict[str, str] = {}
        self.done_at: dict[str, float] = {}
        self.events = 0
        self.connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _see(self, obj: JSON, now: float) -> None:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        if name not in self.taskrun_at and status.get("taskRunName"):
            self.taskrun_at[name] = now
            self.taskrun_name[name] = status["taskRunName"]
        if name not in self.done_at and status.get("completionTime"):
            self.done_at[name] = now

    async def start(self, deadline: float) -> None:
        self._task = asyncio.create_task(self._run(deadline))
        await asyncio.wait_for(self.connected.wait(), 30)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, deadline: float) -> None:
        headers = {"Authorization": f"Bearer {self.cluster.admin.token}"}
        base = (f"{self.cluster.url}/apis/{self.group_version}/namespaces/{self.namespace}"
                f"/{self.plural}")
        select = f"fieldSelector={self.field_selector}&" if self.field_selector else ""
        ssl_ctx = self.cluster.ssl_context()
        async with aiohttp.ClientSession(headers=headers) as session:
            for _ in range(100):  # custom resource storage may answer 404/429 a moment
                async with session.get(f"{base}?{select}", ssl=ssl_ctx) as resp:
                    listed = orjson.loads(await resp.read())
                if resp.status == 200:
                    break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError(f"observer list: {resp.status} {listed}")
            now = time.monotonic()
            for item in listed.get("items", []):
                self._see(item, now)
            rv = listed["metadata"]["resourceVersion"]
            while time.monotonic() < deadline:
                left = max(1, int(deadline - time.monotonic()))
                url = (f"{base}?{select}watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                       f"&timeoutSeconds={min(left, 1800)}")
                async with session.get(url, ssl=ssl_ctx,
                                       timeout=aiohttp.ClientTimeout(total=None)) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"observer watch: {resp.status}")
                    self.connected.set()
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        now = time.monotonic()
                        event = orjson.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"observer watch: {obj}")
                        rv = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self.events += 1
                            self._see(obj, now)

    async def wait(self, what: str, names: Iterable[str], deadline: float) -> None:
        """Until every name has `what` ('taskrun' or 'done') recorded, or the deadline."""
        seen = self.taskrun_at if what == "taskrun" else self.done_at
        wanted = list(names)
        while True:
            if self._task is not None and self._task.done():
                self._task.result()
                raise RuntimeError("observer stopped")
            missing = sum(1 for n in wanted if n not in seen)
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{missing} of {len(wanted)} BuildRuns without {what}")
            await asyncio.sleep(0.05)


async def outcomes(kube: Kube) -> dict[str, int]:
    """BuildRuns by the reason of their Succeeded condition (the warm-up included)."""
    items = (await kube.list(BUILDRUNS, NS))["items"]
    reasons: Counter[str] = Counter()
    for br in items:
        cond: JSON = next((c for c in (br.get("status") or {}).get("conditions") or []
                     if c.get("type") == "Succeeded"), {})
        reasons[f"{cond.get('status', '-')} {cond.get('reason', '-')}"] += 1
    return dict(reasons)


async def apiserver_requests(cluster: LocalCluster) -> dict[str, int]:
    """apiserver_request_total summed over codes, by "VERB resource[/subresource]", for
    Shipwright's, Tekton's and core resources and Leases (Shipwright's controller always
    runs leader election; ours runs without in the benchmarks); and as "WATCHLIST
    resource" the watches among them that were watch-lists (sendInitialEvents: the list
    as a stream; apiserver_watch_list_duration_seconds, counted when its list ends); and as
    "ETCD operation resource" the requests the API server made to etcd for them
    (etcd_requests_total: an update whose cached object was stale shows as a "get" and a
    second "update" more per write)."""
    text = (await apiserver_get(cluster, "/metrics")).decode()
    out: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in ("apiserver_request", "apiserver_watch_list_duration_seconds",
                               "etcd_requests"):
            continue
        for s in family.samples:
            lb = s.labels
            if lb.get("group") not in ("shipwright.io", "tekton.dev", "", "coordination.k8s.io"):
                continue
            if s.name == "apiserver_watch_list_duration_seconds_count":
                key = f"WATCHLIST {lb.get('resource')}"
            elif s.name == "etcd_requests_total":
                key = f"ETCD {lb.get('operation')} {lb.get('resource')}"
            elif s.name == "apiserver_request_total":
                key = f"{lb.get('verb')} {lb.get('resource')}" + (
                    f"/{lb['subresource']}" if lb.get("subresource") else "")
            else:
                continue
            out[key] = out.get(key, 0) + int(s.value)
    return out


def per_object(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    """Requests per object between two apiserver_requests() readings, by kind of request."""
    keys = sorted(set(after) | set(before))
    diff = {k: (after.get(k, 0) - before.get(k, 0)) / n for k in keys}
    return {k: round(v, 3) for k, v in diff.items() if v}


async def load_kube(cluster: LocalCluster) -> Kube:
    from controller.runtime.kube import load_api_client
    return Kube(await load_api_client(str(cluster.kubeconfig)))



async def warm_up(kube: Kube, observer: Observer, deadline: float, *,
                  simulate: bool = True) -> float:
    """One BuildRun ("warmup") through the whole cycle, its TaskRun finished by
    TektonStatusWriter (`simulate`) or by real Tekton; seconds it took."""
    t = time.monotonic()
    await kube.create(BUILDRUNS, NS, fixtures.buildrun(WARMUP))
    await observer.wait("taskrun", [WARMUP], deadline)
    if simulate:
        await TektonStatusWriter(kube).finish(NS, observer.taskrun_name[WARMUP])
    await observer.wait("done", [WARMUP], deadline)
    return time.monotonic() - t

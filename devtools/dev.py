"""`make dev`: the controller against a real local API server, with sample BuildRuns.

What runs, all on loopback and in a throwaway folder under /tmp:

- a LocalCluster (real etcd + kube-apiserver, CRDs applied);
- the controller itself, in-process (controller.app.App), watching namespace
  "demo", its /metrics on the printed URL;
- a **simulated** Tekton, labelled "[tekton-simulator]" wherever it speaks:
  no Tekton runs here, so it watches the namespace's TaskRuns and starts and
  finishes them after short delays (and honours cancellation) through the
  real API server, as Tekton's controller would;
- a FlakyWebhook (a real validating admission webhook) whose first two calls
  time out, so the first BuildRun's TaskRun creation hits system errors that
  the controller retries with backoff until it goes through.

Then it creates a BuildStrategy, sample Builds and four BuildRuns (one
succeeds, one fails with a user error, one rides out the flaky webhook, one
is cancelled while it runs) and shows a live table of BuildRuns until Ctrl-C,
which drains the controller and stops every server. `--once` (or DEV_ONCE=1)
exits by itself once every sample is terminal, non-zero if any sample did
not end as expected.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import termios
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import aiohttp
from prometheus_client import REGISTRY

from controller.app import App
from controller.buildrun.resources import BUILDRUNS, BUILDS, BUILDSTRATEGIES, TASKRUNS
from controller.buildrun.status import succeeded_condition
from controller.buildrun.taskrun import LABEL_BUILDRUN
from controller.runtime import logs
from controller.runtime.kube import JSON, ApiError, Kube
from controller.runtime.kube import load_api_client as _load_api_client
from controller.runtime.reconcile import RetryBudget
from controller.runtime.timestamps import parse_time
from controller.settings import QueueSettings, Settings
from devtools.localcluster import LocalCluster
from devtools.tekton import Finish, TektonSimulator
from devtools.webhook import FlakyWebhook, Verdict

NAMESPACE = "demo"
API = "shipwright.io/v1beta1"
CANCELED = "BuildRunCanceled"
TASKRUN_CANCELLED = "TaskRunCancelled"
SIMULATOR = "[tekton-simulator]"
WEBHOOK = "[flaky-webhook]"
DEV = "[dev]"
# The webhook times out this many TaskRun creations, then allows every one.
WEBHOOK_FAILURES = 2


@dataclass(frozen=True)
class Sample:
    name: str
    build: str
    expect: str  # the reason its Succeeded condition must end with
    story: str
    run_seconds: float = 4.0  # how long the simulated TaskRun runs once started


SAMPLES = (
    Sample("flaky-webhook", "hello", "Succeeded",
           f"TaskRun creation times out {WEBHOOK_FAILURES}x at a webhook; retried with backoff"),
    Sample("hello", "hello", "Succeeded", "runs and succeeds"),
    Sample("missing-build", "does-not-exist", "BuildNotFound",
           "user error: its Build does not exist, fails at once, never retried"),
    Sample("cancel-me", "hello", CANCELED,
           "cancelled (spec.state=BuildRunCanceled) while its TaskRun runs", 3600.0),
)
SAMPLE_BY_NAME = {s.name: s for s in SAMPLES}


# -- output ----------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration: 42s, 3m12s, 25m, 5h3m, 3d."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def _since(text: str | None, now: datetime.datetime) -> str:
    t = parse_time(text)
    return human_duration((now - t).total_seconds()) if t else "<none>"


COLUMNS = ("NAME", "SUCCEEDED", "REASON", "STARTED", "COMPLETED", "AGE")


def row_of(buildrun: JSON, now: datetime.datetime) -> tuple[str, ...]:
    status = buildrun.get("status") or {}
    cond = (succeeded_condition(buildrun.get("status")) or {})
    return (
        buildrun["metadata"]["name"],
        cond.get("status") or "",
        cond.get("reason") or "",
        _since(status.get("startTime"), now),
        _since(status.get("completionTime"), now),
        _since(buildrun["metadata"].get("creationTimestamp"), now),
    )


def render_table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [COLUMNS, *rows]]


class Screen:
    """On a terminal: one block (table + recent activity) redrawn in place.
    Otherwise (a pipe, a file, a test): append-only, like `kubectl get -w`: a row is
    printed whenever what it says changes, activity lines as they happen."""

    def __init__(self, out: TextIO, live: bool, activity_lines: int = 12) -> None:
        self.out = out
        self.live = live
        self.activity: list[str] = []
        self.activity_lines = activity_lines
        self._drawn = 0
        self._last: dict[str, tuple[str, ...]] = {}
        self._header_printed = False
        self._last_summary = ""

    def say(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        self.activity.append(stamped)
        del self.activity[: -self.activity_lines]
        if not self.live:
            self.out.write(stamped + "\n")
            self.out.flush()

    def print(self, text: str = "") -> None:
        """Static lines above the live block."""
        self._erase()
        self.out.write(text + "\n")
        self.out.flush()

    def _erase(self) -> None:
        if self.live and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def update(self, buildruns: list[JSON]) -> None:
        now = datetime.datetime.now(datetime.UTC)
        rows = [row_of(b, now) for b in sorted(buildruns, key=_created)]
        if self.live:
            self._draw(rows)
            return
        summary = metrics_summary()
        if summary != self._last_summary:
            self._last_summary = summary
            self.say(summary)
        # Append-only: the header once, then each row whose status columns changed
        # (ages tick every second, so they are not compared).
        changed = [r for r in rows if self._last.get(r[0], ())[:3] != r[:3]]
        for r in rows:
            self._last[r[0]] = r
        if not changed:
            return
        lines = render_table(changed if self._header_printed else rows)
        if self._header_printed:
            lines = lines[1:]
        self._header_printed = True
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()

    def _draw(self, rows: list[tuple[str, ...]]) -> None:
        width = max(shutil.get_terminal_size().columns - 1, 20)
        lines = render_table(rows) + ["", metrics_summary(), "", "recent activity:"] + [
            f"  {a}" for a in self.activity
        ]
        self._erase()
        self.out.write("".join(line[:width] + "\n" for line in lines))
        self.out.flush()
        self._drawn = len(lines)

    def final(self, buildruns: list[JSON]) -> None:
        """The last table, printed in full in either mode."""
        now = datetime.datetime.now(datetime.UTC)
        if self.live:
            self._draw([row_of(b, now) for b in sorted(buildruns, key=_created)])
            self._drawn = 0
            return
        self.out.write("\n" + "\n".join(render_table(
            [row_of(b, now) for b in sorted(buildruns, key=_created)])) + "\n")
        self.out.flush()


def metrics_summary() -> str:
    """A one-line digest of the controller's own counters (the same process's registry)."""
    totals: dict[str, dict[str, float]] = {"retries": {}, "completed": {}, "reconciles": {}}
    wanted = {
        "buildrun_retries_total": ("retries", "error_class"),
        "buildrun_completed_total": ("completed", "reason"),
        "controller_runtime_reconcile_total": ("reconciles", "result"),
    }
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name in wanted:
                key, label = wanted[sample.name]
                value = sample.labels.get(label, "")
                totals[key][value] = totals[key].get(value, 0.0) + sample.value

    def part(key: str) -> str:
        items = sorted(totals[key].items())
        return " ".join(f"{k}={v:g}" for k, v in items if v) or "none"

    return (f"metrics: reconciles {part('reconciles')} | retries by error_class "
            f"{part('retries')} | completed {part('completed')}")


def _created(buildrun: JSON) -> tuple[str, str]:
    meta = buildrun["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])


# -- the simulated Tekton ------------------------------------------------------------


@dataclass
class _Run:
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class SimulatedTekton:
    """Watches TaskRuns in one namespace and moves each one along as Tekton would:
    Running after `start_after` seconds, then Succeeded after the run time `plan`
    gives it, or Failed/TaskRunCancelled as soon as its spec asks for cancellation.
    Every status write goes through the real API server (devtools.tekton).
    """

    def __init__(self, kube: Kube, namespace: str, say: Callable[[str], None],
                 plan: Callable[[JSON], tuple[float, Finish]],
                 *, start_after: float = 1.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.say = say
        self.plan = plan
        self.start_after = start_after
        self.sim = TektonSimulator(kube)
        self._runs: dict[str, _Run] = {}

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self._list_and_watch()
                except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as exc:
                    self.say(f"{SIMULATOR} watch interrupted ({exc}); listing again")
                    await asyncio.sleep(1.0)
        finally:
            tasks = [r.task for r in self._runs.values() if r.task is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _list_and_watch(self) -> None:
        listing = await self.kube.list(TASKRUNS, self.namespace)
        for item in listing.get("items") or []:
            self._observe(item)
        version = listing["metadata"]["resourceVersion"]
        while True:
            async for event in self.kube.watch(TASKRUNS, self.namespace, version,
                                               timeout_seconds=60):
                obj = event.get("object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._observe(obj)

    def _observe(self, taskrun: JSON) -> None:
        name = taskrun["metadata"]["name"]
        status = taskrun.get("status") or {}
        finished = any(c.get("type") == "Succeeded" and c.get("status") in ("True", "False")
                       for c in status.get("conditions") or [])
        run = self._runs.get(name)
        if run is None:
            if finished:
                return
            run = self._runs[name] = _Run()
            run.task = asyncio.create_task(self._drive(taskrun, run), name=f"tekton-{name}")
        if (taskrun.get("spec") or {}).get("status") == TASKRUN_CANCELLED:
            run.cancel.set()

    async def _drive(self, taskrun: JSON, run: _Run) -> None:
        name = taskrun["metadata"]["name"]
        owner = (taskrun["metadata"].get("labels") or {}).get(LABEL_BUILDRUN, "?")
        run_for, how = self.plan(taskrun)
        try:
            self.say(f"{SIMULATOR} TaskRun {name} (BuildRun {owner}) seen, pod scheduling")
            if await self._wait_cancel(run, self.start_after):
                await self._finish(name, "cancelled", owner)
                return
            await self.sim.start(self.namespace, name)
            self.say(f"{SIMULATOR} TaskRun {name} Running (pod {name}-pod)")
            if await self._wait_cancel(run, run_for):
                await self._finish(name, "cancelled", owner)
                return
            await self._finish(name, how, owner)
        except ApiError as exc:
            self.say(f"{SIMULATOR} TaskRun {name}: {exc.status} {exc.reason}, leaving it")

    async def _finish(self, name: str, how: Finish, owner: str) -> None:
        await self.sim.finish(self.namespace, name, how)
        words = {"success": "Succeeded", "cancelled": "cancelled (TaskRunCancelled)"}
        self.say(f"{SIMULATOR} TaskRun {name} (BuildRun {owner}) {words.get(how, how)}")

    @staticmethod
    async def _wait_cancel(run: _Run, seconds: float) -> bool:
        """Sleeps `seconds`; True as soon as cancellation is asked for."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.cancel.wait(), seconds)
        return run.cancel.is_set()


# -- the sample objects --------------------------------------------------------------


async def create_samples_base(kube: Kube) -> None:
    await kube.request("POST", "/api/v1/namespaces", body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    await kube.create(BUILDSTRATEGIES, NAMESPACE, {
        "apiVersion": API, "kind": "BuildStrategy", "metadata": {"name": "kaniko"},
        "spec": {
            "parameters": [{"name": "dockerfile", "type": "string", "default": "Dockerfile"}],
            "steps": [{"name": "build", "image": "gcr.io/kaniko-project/executor",
                       "args": ["--dockerfile=$(params.dockerfile)",
                                "--destination=$(params.shp-output-image)"]}],
        },
    })
    await kube.create(BUILDS, NAMESPACE, {
        "apiVersion": API, "kind": "Build", "metadata": {"name": "hello"},
        "spec": {
            "strategy": {"name": "kaniko", "kind": "BuildStrategy"},
            "source": {"git": {"url": "https://github.com/shipwright-io/sample-go"}},
            "output": {"image": "registry.example.com/demo/hello:latest"},
        },
    })


async def create_buildrun(kube: Kube, sample: Sample) -> None:
    await kube.create(BUILDRUNS, NAMESPACE, {
        "apiVersion": API, "kind": "BuildRun", "metadata": {"name": sample.name},
        "spec": {"build": {"name": sample.build}},
    })


async def wait_until(predicate: Callable[[], object], timeout: float,
                     interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return True
        await asyncio.sleep(interval)
    return False


async def play_samples(kube: Kube, say: Callable[[str], None]) -> None:
    """Creates the sample BuildRuns in an order that makes each story happen."""
    flaky, hello, missing, cancel = SAMPLES

    async def get(name: str) -> JSON:
        return await kube.get(BUILDRUNS, NAMESPACE, name)

    async def has_taskrun(name: str) -> bool:
        return bool(((await get(name)).get("status") or {}).get("taskRunName"))

    # The webhook's script counts calls, not BuildRuns: let this one take the
    # failing calls before any other BuildRun creates a TaskRun.
    say(f"{DEV} creating BuildRun {flaky.name}: {flaky.story}")
    await create_buildrun(kube, flaky)
    await wait_until(lambda: has_taskrun(flaky.name), 60)
    for sample in (hello, missing, cancel):
        say(f"{DEV} creating BuildRun {sample.name}: {sample.story}")
        await create_buildrun(kube, sample)

    async def running(name: str) -> bool:
        cond = succeeded_condition((await get(name)).get("status")) or {}
        return cond.get("reason") == "Running"

    await wait_until(lambda: running(cancel.name), 60)
    say(f"{DEV} cancelling BuildRun {cancel.name}: merge patch spec.state={CANCELED}")
    await kube.patch(BUILDRUNS, NAMESPACE, cancel.name, {"spec": {"state": CANCELED}})


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def plan_for(taskrun: JSON) -> tuple[float, Finish]:
    owner = (taskrun["metadata"].get("labels") or {}).get(LABEL_BUILDRUN, "")
    sample = SAMPLE_BY_NAME.get(owner)
    return (sample.run_seconds if sample else 4.0), "success"


# -- running it all ----------------------------------------------------------------


def pick_address(preferred: str) -> str:
    """`preferred` if that port is free, else any free port on the same host."""
    host, _, port = preferred.rpartition(":")
    with socket.socket() as s:
        try:
            s.bind((host or "127.0.0.1", int(port)))
        except OSError:
            return f"{host or '127.0.0.1'}:0"
    return preferred


@dataclass
class Dev:
    args: argparse.Namespace
    screen: Screen
    workdir: Path
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> int:
        screen = self.screen
        screen.print(f"{DEV} working folder: {self.workdir}")
        screen.print(f"{DEV} starting a local etcd and kube-apiserver ...")
        async with LocalCluster(self.workdir / "cluster") as cluster:
            kube = Kube(await _load_api_client(str(cluster.kubeconfig)))
            try:
                return await self._with_cluster(cluster, kube)
            finally:
                await kube.close()
                screen.print(f"{DEV} stopping the API server and etcd")

    async def _with_cluster(self, cluster: LocalCluster, kube: Kube) -> int:
        screen = self.screen
        await create_samples_base(kube)
        settings = Settings(
            kubeconfig=str(cluster.kubeconfig),
            namespace=NAMESPACE,
            metrics_address=pick_address(self.args.metrics_address),
            probe_address="127.0.0.1:0",
            shutdown_grace=5.0,
            queue=QueueSettings(base_delay=0.05, max_delay=5.0),
            budget=RetryBudget(max_retries=10, max_age=0),
        )
        app = await App.create(settings, identity="make-dev")
        app_task = asyncio.create_task(app.run(handle_signals=False), name="controller")
        tasks: list[asyncio.Task[None]] = []
        try:
            def started() -> bool:
                return app_task.done() or (
                    app.synced() and "metrics" in app.endpoints.addresses)

            if not await wait_until(started, 30, 0.05) or app_task.done():
                screen.print(f"{DEV} the controller did not start; see {self.log_file}")
                return 1
            metrics_url = f"http://{app.endpoints.addresses['metrics']}/metrics"
            screen.print(f"{DEV} controller running in-process; metrics: {metrics_url}")
            screen.print(f"{DEV} controller logs: {self.log_file}")
            screen.print(f"{DEV} kubectl --kubeconfig {cluster.kubeconfig} -n {NAMESPACE} "
                         "get buildruns,taskruns")
            screen.print(f"{DEV} {SIMULATOR} is a stand-in for Tekton: no real builds run")
            if not self.args.once:
                screen.print(f"{DEV} Ctrl-C stops everything")
            screen.print()

            def script(call: int) -> Verdict:
                verdict: Verdict = "timeout" if call <= WEBHOOK_FAILURES else "allow"
                screen.say(f"{WEBHOOK} TaskRun create #{call}: "
                           + ("timing out (the API server gives up after 1s)"
                              if verdict == "timeout" else "allowed"))
                return verdict

            webhook = FlakyWebhook(cluster, NAMESPACE, script)
            await webhook.__aenter__()
            try:
                tekton = SimulatedTekton(kube, NAMESPACE, screen.say, plan_for)
                tasks.append(asyncio.create_task(tekton.run(), name="tekton-simulator"))
                tasks.append(asyncio.create_task(play_samples(kube, screen.say),
                                                 name="samples"))
                code = await self._watch(kube, app_task, tasks[-1])
                # In order: the simulated Tekton and the samples, then the controller
                # (it drains while the webhook still answers), then the webhook.
                await _cancel(tasks)
                app.request_stop()
                screen.print(f"{DEV} stopping the controller (drain in-flight reconciles) ...")
                controller_code = await asyncio.wait_for(app_task, 30)
                screen.print(f"{DEV} controller stopped with exit code {controller_code}")
                return code or controller_code
            finally:
                try:
                    await webhook.__aexit__(None, None, None)
                except Exception as exc:
                    screen.print(f"{DEV} could not remove the webhook cleanly: {exc!r}")
        finally:
            await _cancel(tasks)
            app.request_stop()
            if not app_task.done():
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(app_task, 30)

    async def _watch(self, kube: Kube, app_task: asyncio.Task[int],
                     samples: asyncio.Task[None]) -> int:
        """Refreshes the table until Ctrl-C, or with --once until every sample is done."""
        deadline = time.monotonic() + self.args.timeout
        buildruns: list[JSON] = []
        while not self.stop.is_set():
            if app_task.done():
                self.screen.print(f"{DEV} the controller stopped unexpectedly; "
                                  f"see {self.log_file}")
                return 1
            if samples.done() and not samples.cancelled() and samples.exception():
                self.screen.print(f"{DEV} creating the samples failed: {samples.exception()!r}")
                return 1
            with contextlib.suppress(ApiError, aiohttp.ClientError, TimeoutError):
                buildruns = (await kube.list(BUILDRUNS, NAMESPACE)).get("items") or []
            self.screen.update(buildruns)
            if self.args.once:
                done = {b["metadata"]["name"]:
                        (succeeded_condition(b.get("status")) or {}).get("reason")
                        for b in buildruns if (b.get("status") or {}).get("completionTime")}
                if all(s.name in done for s in SAMPLES):
                    self.screen.final(buildruns)
                    return self._verdict(done)
                if time.monotonic() > deadline:
                    self.screen.final(buildruns)
                    self.screen.print(f"{DEV} timed out after {self.args.timeout}s waiting "
                                      "for the samples to finish")
                    return 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.5)
        self.screen.final(buildruns)
        return 0

    def _verdict(self, done: dict[str, str | None]) -> int:
        wrong = [f"{s.name}: expected {s.expect}, got {done.get(s.name)}"
                 for s in SAMPLES if done.get(s.name) != s.expect]
        if wrong:
            self.screen.print(f"{DEV} unexpected outcomes: " + "; ".join(wrong))
            return 1
        self.screen.print(f"{DEV} all {len(SAMPLES)} sample BuildRuns ended as expected: "
                          + ", ".join(f"{s.name}={s.expect}" for s in SAMPLES))
        return 0

    @property
    def log_file(self) -> Path:
        return self.workdir / "controller.log"


def setup_logging(path: Path, level: str) -> None:
    """Controller logs go to a file: the terminal belongs to the table."""
    logs.setup(level, "text")
    handler = logging.FileHandler(path)
    handler.setFormatter(logs.TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devtools.dev",
        description="Run the controller against a local API server with sample BuildRuns "
                    "and a simulated Tekton.",
    )
    p.add_argument("--once", action="store_true",
                   default=os.environ.get("DEV_ONCE", "") not in ("", "0"),
                   help="exit once every sample BuildRun is terminal (also: DEV_ONCE=1); "
                        "exit code 1 if any did not end as expected")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="with --once: give up after this long (default 120)")
    p.add_argument("--metrics-address", default="127.0.0.1:8080",
                   help="where /metrics listens (default 127.0.0.1:8080, else any free port)")
    p.add_argument("--workdir", type=Path,
                   help="folder for the cluster's data and logs (default: a new one under "
                        "/tmp, removed on exit)")
    p.add_argument("--keep", action="store_true", help="keep the working folder on exit")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


_restore_terminal: list[Callable[[], None]] = []


@contextlib.contextmanager
def keys_not_signals(on_stop: Callable[[], None]) -> Iterator[None]:
    """On a terminal, Ctrl-C is read as a key instead of raising SIGINT.

    The terminal sends SIGINT to the whole foreground process group, which
    includes etcd and kube-apiserver: they would die before the controller had
    drained. With ISIG (and echo) off, Ctrl-C (or q) arrives on stdin, and only
    this process decides the order things stop in. The terminal is restored on exit.
    """
    fd = sys.stdin.fileno() if sys.stdin is not None else -1
    if fd < 0 or not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    changed = termios.tcgetattr(fd)
    changed[3] &= ~(termios.ISIG | termios.ICANON | termios.ECHO)
    termios.tcsetattr(fd, termios.TCSADRAIN, changed)
    _restore_terminal.append(lambda: termios.tcsetattr(fd, termios.TCSADRAIN, saved))
    loop = asyncio.get_running_loop()

    def on_key() -> None:
        data = os.read(fd, 64)
        if not data or b"\x03" in data or b"q" in data or b"\x04" in data:
            on_stop()

    loop.add_reader(fd, on_key)
    try:
        yield
    finally:
        loop.remove_reader(fd)
        _restore_terminal.pop()()


async def _main(args: argparse.Namespace, screen: Screen, workdir: Path) -> int:
    dev = Dev(args, screen, workdir)
    loop = asyncio.get_running_loop()
    presses = 0

    def on_stop() -> None:
        nonlocal presses
        presses += 1
        if presses > 1:
            screen.print(f"{DEV} asked twice: exiting at once")
            for restore in _restore_terminal:
                restore()
            os._exit(130)
        screen.print(f"{DEV} stopping (Ctrl-C again to force) ...")
        dev.stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_stop)
    with keys_not_signals(on_stop):
        return await dev.run()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    temporary = args.workdir is None
    workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="buildrun-dev-"))
    workdir.mkdir(parents=True, exist_ok=True)
    setup_logging(workdir / "controller.log", args.log_level)
    screen = Screen(sys.stdout, live=sys.stdout.isatty())
    code = 1
    try:
        code = asyncio.run(_main(args, screen, workdir))
    finally:
        if temporary and not args.keep and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            screen.print(f"{DEV} kept {workdir} (logs of the controller and the servers)")
    screen.print(f"{DEV} done (exit code {code})")
    return code


if __name__ == "__main__":
    raise SystemExit(main())

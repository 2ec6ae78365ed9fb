"""`make dev`: the controller against a real local Kubernetes with real Tekton, with
sample BuildRuns.

What runs, all on loopback and in a throwaway folder under /tmp:

- the whole local stack (devtools.cluster.stack.TektonStack): etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler, kwok playing the kubelet, and Tekton
  Pipelines' real webhook and controller, which run the TaskRuns; a FateWebhook
  (devtools.fakes.fates) tells kwok how long each sample's pod runs and how it ends,
  and every change Tekton makes to a TaskRun's condition is told on a "[tekton]"
  line (devtools.dev.tektonlog);
- where the machine holds one, the stack's real node (devtools.node.realnode:
  containerd and a real kubelet, a Git server and a registry on loopback), on which the
  sample `real-build` really builds Shipwright's buildah sample; every line its build
  prints is told on a "[build]" line (devtools.dev.buildlog). Where it cannot, one
  "[dev]" line says what is missing and the other samples run as before;
- the controller itself, in-process (controller.app.App), watching namespace
  "demo", its /metrics on the printed URL;
- a FlakyWebhook (a real validating admission webhook) whose first two calls
  time out, so the first BuildRun's TaskRun creation hits system errors that
  the controller retries with backoff until it goes through.

Then it creates a BuildStrategy, sample Builds and four BuildRuns (one
succeeds, one fails with a user error, one rides out the flaky webhook, one
is cancelled while it runs) and shows a live table of BuildRuns until Ctrl-C,
which drains the controller and stops every server. `--once` (or DEV_ONCE=1)
exits by itself once every sample is terminal, non-zero if any sample did
not end as expected.

This module parses the flags and wires the parts together, and owns the order
things start and stop in; the parts are devtools.dev.samples (the four BuildRuns and
their story), devtools.dev.tektonlog (what Tekton does), devtools.dev.screen (the table
and the activity lines) and devtools.dev.terminal (Ctrl-C as a key).

Invariants: everything started is stopped before `main` returns, in this order:
the Tekton log and the samples, then the controller (it drains while the
webhook still answers), then the webhooks, then the stack; the working
folder is removed only if it was made here, not asked to be kept, and the exit
code is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from controller.app import App
from controller.runtime import logs
from controller.runtime.kube import JSON, ApiError, Kube
from controller.runtime.kube import load_api_client as _load_api_client
from controller.settings import QueueSettings, RetryBudget, Settings
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.polling import wait_until
from devtools.cluster.stack import TektonStack
from devtools.dev.buildlog import BuildLog
from devtools.dev.samples import (
    NAMESPACE,
    REAL_BUILD,
    SAMPLES,
    Sample,
    create_real_build,
    create_samples_base,
    fate_for,
    finished,
    play_samples,
    unexpected,
    webhook_script,
)
from devtools.dev.screen import DEV, Screen
from devtools.dev.tektonlog import TEKTON, TektonLog
from devtools.dev.terminal import keys_not_signals, restore_terminal
from devtools.fakes.fates import FateWebhook
from devtools.fakes.webhook import FlakyWebhook
from devtools.node.realnode import RealNode

# SAMPLES is read from here by tests/test_docs.py (it lives in devtools.dev.samples).
__all__ = ["SAMPLES", "Dev", "main", "parser"]


async def _let_build_log_end(tasks: list[asyncio.Task[None]]) -> None:
    """Once every sample has ended, the real build's log still has its last step's lines
    to tell (the BuildRun ends as the pod does; the log is read after): up to 15 s for
    the follow to end by itself, as it does once each step's container has. A cold run
    cancelled it after the build step, before image-processing's lines."""
    samples = next(t for t in tasks if t.get_name() == "samples")
    build_log = next((t for t in tasks if t.get_name() == "build-log"), None)
    if build_log is None or not samples.done() or samples.cancelled():
        return
    await asyncio.wait({build_log}, timeout=15)  # its errors are _cancel's to gather


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


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
    """One `make dev` run in `workdir`; `stop` set (Ctrl-C, SIGTERM) ends it in order."""

    args: argparse.Namespace
    screen: Screen
    workdir: Path
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    real_node: RealNode | None = None
    samples: tuple[Sample, ...] = SAMPLES
    # The Tekton release the stack runs (hack/tekton/build's), once it is built.
    tekton_version: str = ""

    async def run(self) -> int:
        screen = self.screen
        screen.print(f"{DEV} working folder: {self.workdir}")
        screen.print(f"{DEV} starting etcd, kube-apiserver, kube-controller-manager, "
                     "kube-scheduler, kwok and Tekton Pipelines ...")
        stack = TektonStack(self.workdir / "stack", real_node=True)
        self.tekton_version = stack.tekton.version
        async with stack:
            screen.print(f"{DEV} stack up in {stack.timings['stack up']:.1f}s "
                         f"(logs: {stack.workdir})")
            if stack.real_node_unavailable:
                screen.print(f"{DEV} no real build here: {stack.real_node_unavailable}")
            else:
                node = self.real_node = await stack.real_node()
                self.samples = (*SAMPLES, REAL_BUILD)
                # Shipwright's step images as built here, read by the controller at start.
                os.environ.update(node.images.shipwright_env())
                screen.print(f"{DEV} real node {node.name} up in "
                             f"{node.timings['node ready']:.1f}s: containerd and a kubelet; "
                             f"git server http://127.0.0.1:{node.git_port}, registry "
                             f"http://{node.registry.address}")
            cluster = stack.cluster
            kube = Kube(await _load_api_client(str(cluster.kubeconfig)))
            try:
                async with FateWebhook(cluster, fate_for):
                    return await self._with_cluster(cluster, kube)
            finally:
                await kube.close()
                screen.print(f"{DEV} stopping Tekton, kwok, the Kubernetes servers and etcd")

    async def _with_cluster(self, cluster: LocalCluster, kube: Kube) -> int:
        screen = self.screen
        await create_samples_base(kube)
        if self.real_node is not None:
            await create_real_build(kube, self.real_node)
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
            screen.print(f"{DEV} {TEKTON} Tekton Pipelines {self.tekton_version} runs the "
                         "TaskRuns; kwok plays the kubelet of every sample's pod"
                         + (f" but {REAL_BUILD.name}'s, which really runs on the real node"
                            if self.real_node else ", so no container runs"))
            if not self.args.once:
                screen.print(f"{DEV} Ctrl-C stops everything")
            screen.print()

            webhook = FlakyWebhook(cluster, NAMESPACE, webhook_script(screen.say))
            await webhook.__aenter__()
            try:
                tekton = TektonLog(kube, NAMESPACE, screen.say)
                tasks.append(asyncio.create_task(tekton.run(), name="tekton-log"))
                if self.real_node is not None:
                    build_log = BuildLog(kube, cluster, NAMESPACE, REAL_BUILD.name, screen.say)
                    tasks.append(asyncio.create_task(build_log.run(), name="build-log"))
                tasks.append(asyncio.create_task(
                    play_samples(kube, screen.say, real=self.real_node is not None),
                    name="samples"))
                code = await self._watch(kube, app_task, tasks[-1])
                await _let_build_log_end(tasks)
                # In order: the Tekton log and the samples, then the controller
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
                done = finished(buildruns)
                if all(s.name in done for s in self.samples):
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
        wrong = unexpected(done, self.samples)
        if wrong:
            self.screen.print(f"{DEV} unexpected outcomes: " + "; ".join(wrong))
            return 1
        self.screen.print(f"{DEV} all {len(self.samples)} sample BuildRuns ended as expected: "
                          + ", ".join(f"{s.name}={s.expect}" for s in self.samples))
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
        prog="python -m devtools.dev.run",
        description="Run the controller against a local Kubernetes with real Tekton "
                    "Pipelines (kwok plays the kubelet), with sample BuildRuns.",
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


async def _main(args: argparse.Namespace, screen: Screen, workdir: Path) -> int:
    dev = Dev(args, screen, workdir)
    loop = asyncio.get_running_loop()
    presses = 0

    def on_stop() -> None:
        nonlocal presses
        presses += 1
        if presses > 1:
            screen.print(f"{DEV} asked twice: exiting at once")
            restore_terminal()
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

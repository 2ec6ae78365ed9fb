"""Shipwright v0.20.13's own controller as a local child process, and its CRDs as its
install puts them. One owner for both users: tests/cluster/test_switchover.py (the
switch from it to ours and back, on the session's stack) and bench/e2e/peer.py (the
peer benchmark).

- The binary: `hack/peer/build` (run in setup by `make peer-build`, a prerequisite of
  `make test`; cached outside the repo) prints the folder holding
  `shipwright-build-controller`.
- The CRDs: Shipwright's own `deploy/crds` read from its module in the Go module cache
  (`devtools.shipwright.source.crds_dir()`, never copied). `crds()` gives them as its
  release.yaml has them: v1alpha1 and v1beta1 served, v1beta1 stored, and
  `spec.conversion` naming Shipwright's conversion webhook (Service
  `shipwright-build/shp-build-webhook`), which runs nowhere here. The API server calls
  it only to convert an object between versions, so while every object is stored as
  v1beta1 and every client asks for v1beta1 (Shipwright's controller, ours, kubectl's
  preferred version) it is never called. `crds(conversion=False)` sets it to None, for
  clusters that must also answer v1alpha1 requests (the bench, test_storage_versions).
  `apply_crds` puts them on as `kubectl apply --server-side` does (one apply, one field
  manager: the cluster's), so they replace ours whole and ours replace them whole.
- The process: `shipwright-build-controller --zap-log-level=error` with KUBECONFIG the
  cluster's admin kubeconfig (it runs as admin: no RBAC of its own is installed) and
  BUILDRUN_MAX_CONCURRENT_RECONCILES the workers. It watches every namespace (it has no
  option to watch fewer) and always runs leader election (a Lease
  `shipwright-build-controller-lock` in namespace `default`, as its main.go sets). Its
  start-up check (cmd/shipwright-build-controller/main.go, checkForPipelinesInstalled)
  asks the REST mapper for TaskRun at tekton.dev/v1beta1 and exits without it: real
  Tekton serves it; the bench's bare cluster adds it (bench/e2e/peer.py). Its metrics
  server is at 127.0.0.1:8383 (the port is fixed in its main.go; the host is set to
  loopback at build time, see hack/peer/build); it serves no probes, so "serving" here
  is its /metrics answering 200.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import aiohttp
import yaml

from controller.runtime.kube import JSON
from devtools import hack
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.polling import wait_until
from devtools.cluster.processes import Child
from devtools.shipwright import source as shipwright

METRICS_PORT = 8383  # fixed in Shipwright's main.go
# controller_runtime_reconcile_total's label for Shipwright's BuildRun controller
# (pkg/reconciler/buildrun/controller.go: controller.New("buildrun-controller", ...)).
RECONCILER = "buildrun-controller"


def binary() -> Path:
    """Shipwright's controller, built once into the cache by hack/peer/build (minutes
    the first time; `make peer-build` does it ahead)."""
    return hack.build("peer") / "shipwright-build-controller"


def crds(*, conversion: bool = True) -> list[JSON]:
    """Shipwright's four CRDs from its module; `conversion` False sets their
    `spec.conversion` to None instead of Shipwright's webhook."""
    out = []
    for path in sorted(shipwright.crds_dir().glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                if not conversion:
                    doc["spec"]["conversion"] = {"strategy": "None"}
                out.append(doc)
    return out


async def apply_crds(cluster: LocalCluster, docs: Iterable[JSON]) -> None:
    """Server-side apply of `docs` (CRDs) under the cluster's one field manager, then
    until established and Shipwright's BuildRuns and Tekton's v1beta1 TaskRuns are
    served (404/429/503 for a moment after Established or a storage change)."""
    for doc in docs:
        await cluster.apply(doc)
    await cluster.wait_crds_established()

    async def serving() -> bool:
        try:
            for path in ("/apis/shipwright.io/v1beta1/buildruns?limit=1",
                         "/apis/tekton.dev/v1beta1/taskruns?limit=1"):
                await cluster.request("GET", path)
        except RuntimeError:
            return False
        return True

    if not await wait_until(serving, 60, 0.1):
        raise TimeoutError("CRDs established but BuildRuns not served after 60 s")


def check_port_free() -> None:
    """Raises unless 127.0.0.1:8383 is free (another of its runs may still hold it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", METRICS_PORT))
        except OSError:
            raise RuntimeError(f"127.0.0.1:{METRICS_PORT} is taken; Shipwright's controller "
                               "serves its metrics there (fixed in its main.go)") from None


def command(kubeconfig: Path, *, workers: int, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """argv and environment of Shipwright's controller against `kubeconfig`."""
    return [str(binary()), "--zap-log-level=error"], {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "BUILDRUN_MAX_CONCURRENT_RECONCILES": str(workers),
        # Written only when it exits for want of Tekton (default /dev/termination-log).
        "TERMINATION_LOG_PATH": str(workdir / "shipwright-termination-log"),
    }


async def wait_serving(check_alive: Callable[[], None], timeout: float,
                       interval: float = 0.02) -> float:
    """Seconds until its /metrics answers 200 (it has no probes); `check_alive` raises
    if the process has exited."""
    start = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async def answers() -> bool:
            check_alive()
            try:
                async with session.get(f"http://127.0.0.1:{METRICS_PORT}/metrics") as resp:
                    await resp.read()
                    return resp.status == 200
            except (TimeoutError, aiohttp.ClientError, OSError):
                return False

        if not await wait_until(answers, timeout, interval):
            raise TimeoutError(f"Shipwright's controller not serving after {timeout}s")
    return time.monotonic() - start


class ShipwrightController:
    """Shipwright's controller as a child process (devtools.cluster.processes.Child, so it
    dies with its parent); `async with` starts it, waits until it serves, and stops it
    with SIGTERM as a Deployment scaled to 0 does."""

    def __init__(self, kubeconfig: Path, log: Path, *, workers: int = 4,
                 lease_seconds: int | None = None) -> None:
        argv, env = command(kubeconfig, workers=workers, workdir=log.parent)
        if lease_seconds is not None:
            # Its Lease outlives a stopped leader (controller-runtime's default, no release
            # on cancel): the next one waits up to this long (default 15 s) to lead.
            env |= {"BUILD_CONTROLLER_LEASE_DURATION": f"{lease_seconds}s",
                    "BUILD_CONTROLLER_RENEW_DEADLINE": f"{lease_seconds * 2 // 3}s",
                    "BUILD_CONTROLLER_RETRY_PERIOD": "1s"}
        self.log = log
        self.process = Child("shipwright-build-controller", argv, log, env)

    async def __aenter__(self) -> ShipwrightController:
        check_port_free()
        self.process.start()
        try:
            await wait_serving(self.process.check_alive, 120, 0.1)
        except BaseException:
            self.process.stop()
            raise
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        try:
            if exc_type is None:
                self.process.check_alive()  # it must not have died on its own
        finally:
            self.process.stop()

    def panic(self) -> str | None:
        """The tail of its log if it shows a Go panic or a goroutine dump, else None."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-3000:] if "panic" in text or "goroutine " in text else None

"""Shipwright's own controller (v0.20.13) as the peer of ours on the bench's cluster.

`throughput.py --mode peer` uses this module; see its docstring for the phases. What
is here: the binary (`hack/peer/build`, built by `make peer-build`, cached outside the repo),
the cluster it needs and the process.

- The cluster: a fresh LocalCluster started bare, then Shipwright's own CRDs read
  from its module (`devtools.shipwright.source.crds_dir()`, never copied), each with
  `spec.conversion` set to None (their conversion webhook is Shipwright's, which
  does not run here; Shipwright's controller reads and writes v1beta1 only), and
  our permissive TaskRun CRD (manifests/testing) served at v1 and, as a copy made
  here in memory, at v1beta1: its start-up check
  (cmd/shipwright-build-controller/main.go, checkForPipelinesInstalled) asks the
  REST mapper for TaskRun at tekton.dev/v1beta1 and exits without it.
- The namespace gets a ServiceAccount `default`: Shipwright runs each TaskRun
  under the BuildRun's ServiceAccount, `pipeline` or else `default`
  (pkg/reconciler/buildrun/resources/service_accounts.go), and retries the
  BuildRun until one exists; a bare kube-apiserver has no controller that makes it.
- The process: `shipwright-build-controller --zap-log-level=error` with
  KUBECONFIG = the cluster's admin kubeconfig (so it runs as admin: no RBAC of its
  own is installed) and BUILDRUN_MAX_CONCURRENT_RECONCILES = the workers. It always
  runs leader election (a Lease in namespace `default`, as its main.go sets). Its
  metrics server is at 127.0.0.1:8383 (the port is fixed in its main.go; the host
  is set to loopback at build time, see hack/peer/build); it serves no probes, so
  "ready" here is its /metrics answering, and the run's warm-up BuildRun (see
  throughput.py) is what shows it reconciling. Its log level is error, ours
  warning: neither logs per reconcile (logr, which Shipwright logs through, has no
  warning level; its default, debug, logs several lines per reconcile).
"""

from __future__ import annotations

import asyncio
import copy
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from bench.e2e.common import NS, Controller
from controller.runtime.errors import is_already_exists
from controller.runtime.kube import JSON, SERVICEACCOUNTS, ApiError, Kube
from devtools.cluster.localcluster import CRD_DIRS, REPO, LocalCluster
from devtools.cluster.polling import wait_until
from devtools.shipwright import source as shipwright

BUILD_SCRIPT = REPO / "hack" / "peer" / "build"
METRICS_PORT = 8383  # fixed in Shipwright's main.go
TASKRUN_CRD = CRD_DIRS[1] / "tekton.dev_taskruns.yaml"
# controller_runtime_reconcile_total's label for Shipwright's BuildRun controller
# (pkg/reconciler/buildrun/controller.go: controller.New("buildrun-controller", ...)).
RECONCILER = "buildrun-controller"


def binary() -> Path:
    """Shipwright's controller, built once into the cache by hack/peer/build (minutes
    the first time; `make peer` does it ahead)."""
    out = subprocess.run([str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return Path(out.strip().splitlines()[-1]) / "shipwright-build-controller"


def taskrun_crd() -> JSON:
    """Our permissive TaskRun CRD, served at v1 (storage) and also at v1beta1."""
    crd: JSON = yaml.safe_load(TASKRUN_CRD.read_text())
    versions = crd["spec"]["versions"]
    if not any(v["name"] == "v1beta1" for v in versions):
        v1 = next(v for v in versions if v["name"] == "v1")
        versions.append({**copy.deepcopy(v1), "name": "v1beta1", "storage": False})
    return crd


def shipwright_crds() -> list[JSON]:
    """Shipwright's CRDs from its module, each with conversion None."""
    crds = []
    for path in sorted(shipwright.crds_dir().glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                doc["spec"]["conversion"] = {"strategy": "None"}
                crds.append(doc)
    return crds


async def start_cluster(cluster: LocalCluster) -> None:
    """etcd + kube-apiserver with Shipwright's CRDs and the TaskRun CRD, serving."""
    await cluster.start_bare()
    await apply_crds(cluster, taskruns=True)


async def apply_crds(cluster: LocalCluster, *, taskruns: bool) -> None:
    """Shipwright's CRDs (over ours where those are applied: the same field manager,
    so Shipwright's replace them whole), and with `taskruns` our TaskRun CRD at v1 and
    v1beta1 (not on the real-Tekton stack, where Tekton's serves both); until served."""
    for crd in [*shipwright_crds(), *([taskrun_crd()] if taskruns else [])]:
        await cluster.apply(crd)
    await cluster.wait_crds_established()

    async def serving() -> bool:
        try:
            for path in ("/apis/shipwright.io/v1beta1/buildruns?limit=1",
                         "/apis/shipwright.io/v1alpha1/buildruns?limit=1",
                         "/apis/tekton.dev/v1beta1/taskruns?limit=1"):
                await cluster.request("GET", path)
        except RuntimeError:  # 404/429/503 a moment after Established
            return False
        return True

    if not await wait_until(serving, 60, 0.1):
        raise TimeoutError("Shipwright's CRDs established but not served after 60 s")


async def add_service_account(kube: Kube, namespace: str = NS) -> None:
    """The namespace's `default` ServiceAccount, unless (real stack) it exists already."""
    try:
        await kube.create(SERVICEACCOUNTS, namespace, {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
    except ApiError as exc:
        if not is_already_exists(exc):
            raise


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ShipwrightController(Controller):
    """Shipwright's controller as a subprocess, with the interface of `Controller`
    (start, wait_ready, reconciles, usage, stop) so throughput.py drives both alike."""

    reconciler = RECONCILER

    def __init__(self, kubeconfig: Path, log_path: Path, *, workers: int,
                 workdir: Path) -> None:
        super().__init__(kubeconfig, log_path, workers=workers)
        self.metrics_port = METRICS_PORT
        self.argv = [str(binary()), "--zap-log-level=error"]
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "BUILDRUN_MAX_CONCURRENT_RECONCILES": str(workers),
            # Written only when it exits for want of Tekton (default /dev/termination-log).
            "TERMINATION_LOG_PATH": str(workdir / "peer-termination-log"),
        }

    async def start(self) -> None:
        if not port_free(self.metrics_port):
            raise RuntimeError(f"127.0.0.1:{self.metrics_port} is taken; Shipwright's "
                               "controller serves its metrics there (fixed in its main.go)")
        await super().start()

    async def wait_ready(self, timeout: float = 600.0) -> tuple[float, float]:
        """Seconds from spawn to its /metrics answering 200 (twice: it has no probes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if await self._status(self.metrics_port, "/metrics") == 200:
                up = time.monotonic() - self.started
                return up, up
            await asyncio.sleep(0.02)
        raise TimeoutError(f"Shipwright's controller not serving after {timeout}s")

    async def events_dropped(self) -> int:
        raise NotImplementedError("Shipwright's controller records no Events")


def describe() -> dict[str, Any]:
    """For the record: which binary, which CRDs."""
    return {"binary": str(binary()), "crds": str(shipwright.crds_dir()),
            "version": shipwright.VERSION}

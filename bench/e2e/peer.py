"""Shipwright's own controller (v0.20.13) as the peer of ours on the bench's cluster.

`throughput.py --mode peer` uses this module; see its docstring for the phases. The
binary, Shipwright's CRDs and the process's command line are
devtools/shipwright/controller.py's (shared with tests/cluster/test_switchover.py);
what is here is what only the bench needs:

- The cluster: a fresh LocalCluster started bare, then Shipwright's own CRDs with
  `spec.conversion` set to None (the bench may ask for v1alpha1; Shipwright's
  controller reads and writes v1beta1 only), and our permissive TaskRun CRD
  (manifests/testing) served at v1 and, as a copy made here in memory, at v1beta1:
  Shipwright's start-up check asks the REST mapper for TaskRun at tekton.dev/v1beta1
  and exits without it.
- The namespace gets a ServiceAccount `default`: Shipwright runs each TaskRun
  under the BuildRun's ServiceAccount, `pipeline` or else `default`
  (pkg/reconciler/buildrun/resources/service_accounts.go), and retries the
  BuildRun until one exists; a bare kube-apiserver has no controller that makes it.
- The process, driven through `Controller`'s interface (start, wait_ready,
  reconciles, usage, stop) so throughput.py drives both alike. Its log level is
  error, ours warning: neither logs per reconcile (logr, which Shipwright logs
  through, has no warning level; its default, debug, logs several lines per
  reconcile). The run's warm-up BuildRun (see throughput.py) is what shows it
  reconciling.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import yaml

from bench.e2e.common import NS, Controller
from controller.runtime.errors import is_already_exists
from controller.runtime.kube import JSON, SERVICEACCOUNTS, ApiError, Kube
from devtools.cluster.localcluster import CRD_DIRS, LocalCluster
from devtools.shipwright import controller as sw
from devtools.shipwright import source as shipwright

TASKRUN_CRD = CRD_DIRS[1] / "tekton.dev_taskruns.yaml"


def taskrun_crd() -> JSON:
    """Our permissive TaskRun CRD, served at v1 (storage) and also at v1beta1."""
    crd: JSON = yaml.safe_load(TASKRUN_CRD.read_text())
    versions = crd["spec"]["versions"]
    if not any(v["name"] == "v1beta1" for v in versions):
        v1 = next(v for v in versions if v["name"] == "v1")
        versions.append({**copy.deepcopy(v1), "name": "v1beta1", "storage": False})
    return crd


async def start_cluster(cluster: LocalCluster) -> None:
    """etcd + kube-apiserver with Shipwright's CRDs and the TaskRun CRD, serving."""
    await cluster.start_bare()
    await apply_crds(cluster, taskruns=True)


async def apply_crds(cluster: LocalCluster, *, taskruns: bool) -> None:
    """Shipwright's CRDs, conversion None (over ours where those are applied: the same
    field manager, so Shipwright's replace them whole), and with `taskruns` our TaskRun
    CRD at v1 and v1beta1 (not on the real-Tekton stack, where Tekton's serves both)."""
    await sw.apply_crds(cluster, [*sw.crds(conversion=False),
                                  *([taskrun_crd()] if taskruns else [])])


async def add_service_account(kube: Kube, namespace: str = NS) -> None:
    """The namespace's `default` ServiceAccount, unless (real stack) it exists already."""
    try:
        await kube.create(SERVICEACCOUNTS, namespace, {
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
    except ApiError as exc:
        if not is_already_exists(exc):
            raise


class ShipwrightController(Controller):
    """Shipwright's controller as a subprocess, with the interface of `Controller`."""

    reconciler = sw.RECONCILER

    def __init__(self, kubeconfig: Path, log_path: Path, *, workers: int,
                 workdir: Path) -> None:
        super().__init__(kubeconfig, log_path, workers=workers)
        self.metrics_port = sw.METRICS_PORT
        self.argv, self.env = sw.command(kubeconfig, workers=workers, workdir=workdir)

    async def start(self) -> None:
        sw.check_port_free()
        await super().start()

    async def wait_ready(self, timeout: float = 600.0) -> tuple[float, float]:
        """Seconds from spawn to its /metrics answering 200 (twice: it has no probes)."""
        await sw.wait_serving(self.check_alive, timeout)
        up = time.monotonic() - self.started
        return up, up

    async def events_dropped(self) -> int:
        raise NotImplementedError("Shipwright's controller records no Events")


def describe() -> dict[str, Any]:
    """For the record: which binary, which CRDs."""
    return {"binary": str(sw.binary()), "crds": str(shipwright.crds_dir()),
            "version": shipwright.VERSION}

"""A small but real Kubernetes with real Tekton Pipelines on loopback, for tests.

`TektonStack` composes `LocalCluster` (etcd + kube-apiserver) with, as local
processes built by hack/build-all and cached in ~/.cache/buildrun-controller:

  kube-scheduler            binds pods to the one Node
  kwok                      fakes that Node's kubelet; pods move by the stages in
                            hack/kwok/stages (README there: annotations pick a fate)
  kube-controller-manager   garbagecollector, serviceaccount(-token), namespace,
                            root-ca-cert-publisher, persistent volumes (its hostPath
                            provisioner behind the default StorageClass) and
                            StatefulSets, each with its own SA credentials
  Tekton webhook+controller `stack.tekton` (devtools.cluster.pipelines): the version
                            hack/tekton/go.mod pins (v1.12.0), or TEKTON_VERSION's
                            (`make tekton-compat`), under Tekton's own RBAC, installed
                            from config/ of that version in the Go module cache

Invariants:
  * Every child is a devtools.cluster.processes.Child that dies with its parent: a killed
    test run leaves nothing behind, and stop() ends the real node, Tekton, each other
    child (reverse start order) and the cluster.
  * start() either returns with the stack ready or raises after stopping what it
    started. Ready means: the Node is Ready and untainted, the `default`
    ServiceAccount of `default` exists (the serviceaccount controller runs), and a
    dry-run TaskRun comes back *defaulted* (Tekton's mutating webhook answers).
  * A missing or unbuildable component is one line, `StackError: <component>: why`,
    never a hang: the build scripts run with check and every wait polls the
    children, so one that exits is reported with the tail of its log.
  * Only Tekton's CRDs define TaskRuns here: the repo's permissive stand-in in
    manifests/testing is never applied; the repo's own CRDs (manifests/crds) and the
    monitoring CRDs from manifests/testing (for the ServiceMonitor and rules) are.

TektonStack(real_node=True) also prepares a real node (devtools.node.realnode:
containerd and a real kubelet, with a registry and a Git server on loopback), started by
the first `await stack.real_node()`; pods go there only when they ask to (its
nodeSelector and toleration, realnode.placement()). Such a stack names Tekton's images as
hack/node-images/build made them, gives the API server a client certificate the kubelet
trusts (pods/log, exec), and has Tekton give every TaskRun pod the host's network.

Measured on the shared 2-core dev machine (load 2.0-2.4), binaries cached:
`python -m devtools.cluster.stack` 12.2-14.5 s wall, of which build scripts 0.3-0.5 s,
API server ready 3.4-4.1 s, CRDs established and Node ready 6.4-8.2 s, stack up
8.7-11.1 s; stop about 1.2 s. A BuildRun to Succeeded through it: 0.4-1.4 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from devtools import hack
from devtools.cluster.certs import issue_client_cert, make_ca
from devtools.cluster.localcluster import LocalCluster, free_port
from devtools.cluster.pipelines import TektonPipelines
from devtools.cluster.polling import wait_until
from devtools.cluster.processes import Children, base_env
from devtools.hack import HACK, REPO, StackError
from devtools.node import realnode
from devtools.node.realnode import NodeError, NodeUnavailable, RealNode

STAGES = HACK / "kwok" / "stages"
TESTING_CRDS = REPO / "manifests" / "testing"
NODE = "kwok-node-0"
# The persistent-volume ones and the StatefulSet controller serve Tekton's PipelineRuns:
# Shipwright's PipelineRun binds its `source` workspace with a volumeClaimTemplate (1Gi
# RWO, no class: the default StorageClass, STORAGE_CLASS, provisioned by kube-controller-
# manager's own hostPath provisioner), and Tekton's affinity assistant, a StatefulSet,
# puts the PipelineRun's pods beside that volume. The claim protection controller removes
# the kubernetes.io/pvc-protection finalizer, without which a namespace never goes.
# The real node runs the Deployment in manifests/ as a cluster does (issue 41): the
# Deployment and ReplicaSet controllers make its pods, the disruption controller keeps its
# PodDisruptionBudget's status (which the eviction API reads), and the EndpointSlice
# controller gives a Service the addresses of its pods, which kube-proxy routes to on the
# real node's pod network (devtools.node.realnode).
KCM_CONTROLLERS = (
    "garbagecollector,serviceaccount,serviceaccount-token,namespace,root-ca-cert-publisher,"
    "persistentvolume-binder-controller,persistentvolume-protection-controller,"
    "persistentvolumeclaim-protection-controller,statefulset-controller,"
    "deployment-controller,replicaset-controller,disruption-controller,"
    "endpointslice-controller"
)
# The default StorageClass: kube-controller-manager's in-tree hostPath provisioner
# (--enable-hostpath-provisioner; a directory under /tmp/hostpath_pv per claim, deleted
# with it). Nothing mounts it: kwok runs no container.
STORAGE_CLASS: dict[str, Any] = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "hostpath",
                 "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    "provisioner": "kubernetes.io/host-path",
    "reclaimPolicy": "Delete",
    "volumeBindingMode": "Immediate",
}



async def _all(*steps: Awaitable[Any]) -> None:
    """Runs `steps` concurrently; the first failure cancels the others (plain gather
    would leave them running against a stack being stopped) and is raised alone."""
    tasks = [asyncio.ensure_future(s) for s in steps]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class TektonStack:
    """kube-apiserver, scheduler, kwok, kube-controller-manager and Tekton in `workdir`.

    Use as `async with TektonStack(dir) as stack:`; `stack.cluster` is the LocalCluster
    (admin kubeconfig, CA, raw `request`). Logs are `workdir/<component>.log`.
    """

    def __init__(self, workdir: Path, *, apiserver_args: list[str] | None = None,
                 tekton_controller_env: dict[str, str] | None = None,
                 real_node: bool = False,
                 controller_manager_args: list[str] | None = None) -> None:
        """`apiserver_args` go to kube-apiserver (LocalCluster); `tekton_controller_env`
        adds to the Tekton controller's environment, e.g. KUBE_API_QPS / KUBE_API_BURST
        (knative reads them; Tekton doubles them). `real_node`: prepare a real node
        (devtools.node.realnode) that `await real_node()` starts; where this machine
        cannot hold one, `real_node_unavailable` says why and the stack runs without.
        `controller_manager_args` go last to kube-controller-manager, e.g. -v=4
        (bench/e2e/namespaces.py)."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        apiserver_args = list(apiserver_args or ())
        self._node_prepared: realnode.Prepared | None = None
        self._real_node: RealNode | None = None
        self._real_node_lock = asyncio.Lock()
        self.real_node_unavailable: str | None = "not asked for (TektonStack(real_node=True))"
        if real_node:
            apiserver_args += self._prepare_real_node()
        kube_bins = hack.build("localcluster")
        self._kcm_bin = hack.need("kube-controller-manager",
                                  kube_bins / "kube-controller-manager")
        self._scheduler_bin = hack.need("kube-scheduler", kube_bins / "kube-scheduler")
        self._kwok_bin = hack.need("kwok", hack.build("kwok") / "kwok")
        self.cluster = LocalCluster(workdir / "cluster", apiserver_args=apiserver_args)
        # SIGTERM, then SIGKILL after 1 s: Tekton's webhook drains for 10 s on SIGTERM
        # (measured: 10.01 s, every other child under 0.25 s), and nothing here is kept.
        self._children = Children(workdir, error=StackError, grace=1.0)
        prepared = self._node_prepared
        self.tekton = TektonPipelines(
            self.cluster, self._children, controller_env=tekton_controller_env,
            # Every TaskRun pod (kwok's too, where it changes nothing) names Tekton's
            # images as the real node's build made them; only the real node pulls them.
            images=prepared.images.tekton_flags() if prepared is not None else None,
            host_network=prepared is not None)
        self._kcm_args = list(controller_manager_args or ())
        # Seconds from start() to each milestone, for the record.
        self.timings: dict[str, float] = {}

    async def __aenter__(self) -> TektonStack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    # -- life cycle -----------------------------------------------------------------

    async def start(self) -> None:
        t0 = time.monotonic()

        def mark(what: str) -> None:
            self.timings[what] = round(time.monotonic() - t0, 2)

        tekton_crds = self.tekton.read_crds()  # while etcd and the API server boot
        try:
            await self.cluster.start_bare()
            mark("apiserver ready")
            self._start_scheduler()
            self._start_kwok()
            await _all(
                self._node_ready(),
                self.tekton.install(tekton_crds),
                self._repo_crds(),
            )
            mark("CRDs established, node ready")
            # The garbage collector learns of resources from discovery when it starts and
            # then only every 30 s: started before the CRDs are served, deleting a TaskRun
            # left its pod for up to 30 s. So it starts once every CRD is served.
            self._start_controller_manager()
            self.tekton.start_webhook()
            self.tekton.start_controller()
            await _all(self.tekton.webhook_admits(), self._default_service_account())
            mark("stack up")
        except BaseException:
            tekton_crds.cancel()
            self.stop()
            raise

    def stop(self) -> None:
        if self._real_node is not None:
            self._real_node.stop()
            self._real_node = None
        self.tekton.stop()
        self._children.stop_all()
        self.cluster.stop()

    def pids(self) -> dict[str, int]:
        """Each running child's process id by name (the cluster's too)."""
        out = self.cluster.pids()
        out.update(self._children.pids())
        return out

    def check_alive(self) -> None:
        """Raises StackError if any child has exited, with the tail of its log."""
        self._children.check_alive()
        if self._real_node is not None:
            try:
                self._real_node.check_alive()
            except RuntimeError as exc:
                raise StackError(f"real node: {exc}") from None

    # -- the real node ---------------------------------------------------------------

    def _prepare_real_node(self) -> list[str]:
        """Builds (or finds) the node's kubelet and images; the API server's flags for
        calling that kubelet (pods/log, exec) with a client certificate it trusts."""
        try:
            self._node_prepared = realnode.prepare()
        except NodeUnavailable as exc:
            self.real_node_unavailable = str(exc)
            return []
        except NodeError as exc:
            raise StackError(f"real node: {exc}") from None
        self.real_node_unavailable = None
        folder = self.workdir / "kubelet-client"
        folder.mkdir(exist_ok=True)
        ca = make_ca("kubelet-client-ca")
        (folder / "ca.crt").write_bytes(ca.cert_pem)
        cert, key = issue_client_cert(ca, realnode.KUBELET_CLIENT, ("system:masters",)).write(
            folder, "apiserver-kubelet-client")
        # A pod's projected ServiceAccount token lives as long as it asks (at least the
        # API server's minimum, 10 minutes), not the year the API server otherwise grants
        # a default-lifetime token for old clients: an old token then really stops
        # working, and a client that never re-reads its token file fails, as in a cluster
        # that rotates them (tests/cluster/test_in_cluster.py, the rotation).
        return [f"--kubelet-client-certificate={cert}", f"--kubelet-client-key={key}",
                "--service-account-extend-token-expiration=false"]

    async def real_node(self) -> RealNode:
        """The real node, started on the first call (Ready in 1.9-2.9 s): NodeUnavailable (one
        line) where this machine cannot hold one or it was not asked for; StackError when
        it was to start and did not."""
        async with self._real_node_lock:
            if self._real_node is not None:
                return self._real_node
            if self._node_prepared is None:
                raise NodeUnavailable(self.real_node_unavailable or "not prepared")
            node = RealNode(self.workdir / "node", self.cluster, self._node_prepared,
                            self.workdir / "kubelet-client" / "ca.crt")
            try:
                await node.start()
            except NodeError as exc:
                raise StackError(f"real node: {exc}") from None
            self._real_node = node
            return node

    # -- pieces ----------------------------------------------------------------------

    async def _wait(
        self,
        component: str,
        what: str,
        check: Callable[[], Awaitable[bool]],
        timeout: float = 60.0,
        every: float = 0.1,
    ) -> None:
        """Until `check()`; StackError as soon as a child has died, or at the timeout."""
        if not await wait_until(check, timeout, every, alive=self.check_alive):
            raise StackError.timed_out(component, what, timeout,
                                       self.workdir / f"{component}.log")

    def _kube_flags(self) -> list[str]:
        kubeconfig = str(self.cluster.kubeconfig)
        # The API server has no client CA, so there is no extension-apiserver-authentication
        # ConfigMap to look up: skip it rather than log its absence every few seconds.
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--authentication-skip-lookup=true",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "-v=1",
        ]

    def _start_scheduler(self) -> None:
        self._children.spawn(
            "kube-scheduler",
            [
                str(self._scheduler_bin),
                *self._kube_flags(),
                f"--secure-port={free_port()}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
            ],
            base_env(),
        )

    def _start_controller_manager(self) -> None:
        self._children.spawn(
            "kube-controller-manager",
            [
                str(self._kcm_bin),
                *self._kube_flags(),
                f"--secure-port={free_port()}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--controllers={KCM_CONTROLLERS}",
                "--enable-hostpath-provisioner",
                f"--service-account-private-key-file={self.cluster.service_account_key}",
                f"--root-ca-file={self.cluster.ca_file}",
                "--use-service-account-credentials=true",
                *self._kcm_args,
            ],
            base_env(),
        )

    def _start_kwok(self) -> None:
        home = self.workdir / "kwok-home"  # kwok also loads ~/.kwok/kwok.yaml if it exists
        home.mkdir(exist_ok=True)
        stages = sorted(STAGES.glob("*.yaml"))
        if not stages:
            raise StackError(f"kwok: no stages in {STAGES}")
        self._children.spawn(
            "kwok",
            [
                str(self._kwok_bin),
                f"--kubeconfig={self.cluster.kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.244.0.0/24",
                "--node-ip=10.96.0.10",
                *(f"--config={s}" for s in stages),
            ],
            base_env(HOME=str(home)),
        )

    async def _node_ready(self) -> None:
        await self.cluster.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "type": "kwok"},
            },
        })

        async def ready() -> bool:
            node = await self.cluster.request("GET", f"/api/v1/nodes/{NODE}")
            conditions = {
                c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []
            }
            return conditions.get("Ready") == "True" and not node["spec"].get("taints")

        await self._wait("kwok", "to make the Node Ready and untainted", ready)

    async def _repo_crds(self) -> None:
        """The repo's CRDs, and the monitoring ones the manifests' ServiceMonitor and
        PrometheusRule need; never manifests/testing's permissive TaskRun CRD."""
        for path in sorted(TESTING_CRDS.glob("monitoring.coreos.com_*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                await self.cluster.apply(doc)
        await self.cluster.apply_crds([REPO / "manifests" / "crds"])
        await self.cluster.apply(STORAGE_CLASS)

    async def _default_service_account(self) -> None:
        async def exists() -> bool:
            try:
                await self.cluster.request(
                    "GET", "/api/v1/namespaces/default/serviceaccounts/default"
                )
            except RuntimeError:
                return False
            return True

        await self._wait("kube-controller-manager", "for the default ServiceAccount", exists)


async def _main() -> None:
    """`python -m devtools.cluster.stack [DIR] [--real-node]`: start, print the timings,
    stop; with --real-node, start the real node too and print its timings."""
    import sys
    import tempfile

    args = [a for a in sys.argv[1:] if a != "--real-node"]
    real = "--real-node" in sys.argv[1:]
    workdir = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="stack-"))
    t = time.monotonic()
    stack = TektonStack(workdir, real_node=real)
    built = time.monotonic() - t
    node = None
    async with stack:
        print(f"build scripts (cached) {built:.2f}s; " + ", ".join(
            f"{k} {v:.2f}s" for k, v in stack.timings.items()), flush=True)
        if real:
            node = await stack.real_node()
        print(f"logs in {workdir}")
    if node is not None:
        print("real node: " + ", ".join(f"{k} {v:.2f}s" for k, v in node.timings.items()))


if __name__ == "__main__":
    try:
        asyncio.run(_main())
    except StackError as exc:
        raise SystemExit(f"StackError: {exc}") from None

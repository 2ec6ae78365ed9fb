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
  Tekton webhook+controller the version hack/tekton/go.mod pins (v1.12.0), or
                            TEKTON_VERSION's (`make tekton-compat`), under Tekton's own
                            RBAC (TokenRequest tokens of its ServiceAccounts); CRDs, RBAC
                            and config maps read at run time from config/ of that version
                            in the Go module cache

Invariants:
  * Every child runs with die_with_parent: a killed test run leaves nothing behind,
    and stop() ends each child (reverse start order) and the cluster.
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

Tekton reaches its webhook the way a cluster does, through a Service reference,
here the ExternalName Service `tekton-pipelines-webhook` -> 127.0.0.1 on the
webhook's port (the API server resolves ExternalName to that host and checks the
certificate against the Service's DNS name). Tekton's own reconcilers then keep
their webhook configurations (rules, paths, caBundle) as they would in a cluster.

Measured on the shared 2-core dev machine (load 2.0-2.4), binaries cached:
`python -m devtools.cluster.stack` 12.2-14.5 s wall, of which build scripts 0.3-0.5 s,
API server ready 3.4-4.1 s, CRDs established and Node ready 6.4-8.2 s, stack up
8.7-11.1 s; stop about 1.2 s. A BuildRun to Succeeded through it: 0.4-1.4 s.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from devtools import hack
from devtools.cluster.certs import issue_client_cert, issue_serving_cert, make_ca
from devtools.cluster.localcluster import (
    LocalCluster,
    free_port,
    write_token_kubeconfig,
)
from devtools.cluster.polling import wait_until
from devtools.cluster.processes import Child, ChildExited, Children, base_env
from devtools.hack import HACK, REPO, StackError
from devtools.node import realnode
from devtools.node.realnode import NodeError, NodeUnavailable, RealNode

STAGES = HACK / "kwok" / "stages"
TESTING_CRDS = REPO / "manifests" / "testing"
TEKTON_NS = "tekton-pipelines"
NODE = "kwok-node-0"
WEBHOOK_SERVICE = "tekton-pipelines-webhook"
CONTROLLER_SA = "tekton-pipelines-controller"
WEBHOOK_SA = "tekton-pipelines-webhook"
# The persistent-volume ones and the StatefulSet controller serve Tekton's PipelineRuns:
# Shipwright's PipelineRun binds its `source` workspace with a volumeClaimTemplate (1Gi
# RWO, no class: the default StorageClass, STORAGE_CLASS, provisioned by kube-controller-
# manager's own hostPath provisioner), and Tekton's affinity assistant, a StatefulSet,
# puts the PipelineRun's pods beside that volume. The claim protection controller removes
# the kubernetes.io/pvc-protection finalizer, without which a namespace never goes.
KCM_CONTROLLERS = (
    "garbagecollector,serviceaccount,serviceaccount-token,namespace,root-ca-cert-publisher,"
    "persistentvolume-binder-controller,persistentvolume-protection-controller,"
    "persistentvolumeclaim-protection-controller,statefulset-controller"
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


def fake_images(tekton_version: str) -> dict[str, str]:
    """The image flags of Tekton's controller, tagged with the release that runs. Only
    strings: Tekton puts them in pod specs and nothing here ever pulls an image."""
    return {
        "-entrypoint-image": f"registry.invalid/tekton/entrypoint:{tekton_version}",
        "-nop-image": f"registry.invalid/tekton/nop:{tekton_version}",
        "-sidecarlogresults-image": f"registry.invalid/tekton/sidecarlogresults:{tekton_version}",
        "-workingdirinit-image": f"registry.invalid/tekton/workingdirinit:{tekton_version}",
        "-shell-image": "registry.invalid/busybox:latest",
        "-shell-image-win": "registry.invalid/powershell:nanoserver",
    }


JSON = dict[str, Any]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _need(component: str, path: Path) -> Path:
    if not path.exists():
        raise StackError(f"{component}: {path} missing (run hack/build-all)")
    return path


def tekton_documents(config_dir: Path, *patterns: str) -> list[JSON]:
    """Tekton's manifests under `config_dir` matching `patterns`, in file order."""
    docs: list[JSON] = []
    for pattern in patterns:
        for path in sorted(config_dir.glob(pattern)):
            # libyaml: the CRDs are 1.4 MB, 4.8 s to parse in pure Python, 0.5 s in C.
            docs += [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d]
    return docs


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
        # The real node's Tekton images, over fake_images' names where it is prepared.
        self._tekton_images: dict[str, str] = {}
        if real_node:
            apiserver_args += self._prepare_real_node()
        kube_bins = hack.build("localcluster")
        self._kcm_bin = _need("kube-controller-manager", kube_bins / "kube-controller-manager")
        self._scheduler_bin = _need("kube-scheduler", kube_bins / "kube-scheduler")
        self._kwok_bin = _need("kwok", hack.build("kwok") / "kwok")
        tekton_bins = hack.build("tekton")
        self._tekton_webhook_bin = _need("tekton webhook", tekton_bins / "webhook")
        self._tekton_controller_bin = _need("tekton controller", tekton_bins / "controller")
        # The release built (hack/tekton/build: go.mod's pin, or TEKTON_VERSION's).
        self.tekton_version = _need("tekton version", tekton_bins / "version").read_text().strip()
        self.tekton_config = _need("tekton config", hack.build("tekton", "--config-dir"))
        self.cluster = LocalCluster(workdir / "cluster", apiserver_args=apiserver_args)
        self.webhook_port = free_port()
        self._children = Children(workdir)
        self._webhook: Child | None = None
        self._tekton_controller: Child | None = None
        self._controller_env = dict(tekton_controller_env or {})
        self._kcm_args = list(controller_manager_args or ())
        self._kubeconfigs: dict[str, Path] = {}
        self._webhook_ca = b""
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

        # Parse Tekton's CRDs (0.5 s) while etcd and the API server boot.
        crds_parsed = asyncio.ensure_future(
            asyncio.to_thread(tekton_documents, self.tekton_config, "300-crds/*.yaml")
        )
        try:
            await self.cluster.start_bare()
            mark("apiserver ready")
            self._start_scheduler()
            self._start_kwok()
            await _all(
                self._node_ready(),
                self._install_tekton(crds_parsed),
                self._repo_crds(),
            )
            mark("CRDs established, node ready")
            # The garbage collector learns of resources from discovery when it starts and
            # then only every 30 s: started before the CRDs are served, deleting a TaskRun
            # left its pod for up to 30 s. So it starts once every CRD is served.
            self._start_controller_manager()
            self.start_tekton_webhook()
            self.start_tekton_controller()
            await _all(self.webhook_admits(), self._default_service_account())
            mark("stack up")
        except BaseException:
            crds_parsed.cancel()
            self.stop()
            raise

    def stop(self) -> None:
        if self._real_node is not None:
            self._real_node.stop()
            self._real_node = None
        self._children.stop_all()
        self._webhook = None
        self._tekton_controller = None
        self.cluster.stop()

    def pids(self) -> dict[str, int]:
        """Each running child's process id by name (the cluster's too)."""
        out = self.cluster.pids()
        out.update(self._children.pids())
        return out

    def check_alive(self) -> None:
        """Raises StackError if any child has exited, with the tail of its log."""
        try:
            self._children.check_alive()
        except ChildExited as exc:
            raise StackError(str(exc)) from None
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
        # Every TaskRun pod (kwok's too, where it changes nothing) names Tekton's images
        # as built here; only the real node ever pulls them.
        self._tekton_images.update(self._node_prepared.images.tekton_flags())
        folder = self.workdir / "kubelet-client"
        folder.mkdir(exist_ok=True)
        ca = make_ca("kubelet-client-ca")
        (folder / "ca.crt").write_bytes(ca.cert_pem)
        cert, key = issue_client_cert(ca, realnode.KUBELET_CLIENT, ("system:masters",)).write(
            folder, "apiserver-kubelet-client")
        return [f"--kubelet-client-certificate={cert}", f"--kubelet-client-key={key}"]

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

    # -- Tekton's webhook, stoppable by tests ----------------------------------------

    def stop_tekton_webhook(self) -> None:
        """Kills the webhook: TaskRun creates then fail with 500 "failed calling webhook"."""
        if self._webhook is not None:
            self._children.stop(self._webhook, signal.SIGKILL)
            self._webhook = None

    def start_tekton_webhook(self) -> None:
        """Starts the webhook (again) on the same port; await webhook_admits() for ready."""
        if self._webhook is not None:
            return
        self._webhook = self._spawn(
            "tekton-webhook",
            [str(self._tekton_webhook_bin)],
            self._tekton_env(
                WEBHOOK_SA,
                "config-leader-election-webhook",
                WEBHOOK_PORT=str(self.webhook_port),
                WEBHOOK_ADMISSION_CONTROLLER_NAME="webhook.pipeline.tekton.dev",
                WEBHOOK_SERVICE_NAME=WEBHOOK_SERVICE,
                WEBHOOK_SECRET_NAME="webhook-certs",
            ),
        )

    async def webhook_admits(self, timeout: float = 60.0) -> None:
        """Waits until a dry-run TaskRun comes back with a timeout set: defaulted proves the
        mutating webhook ran, not just the API server."""
        probe: JSON = {
            "apiVersion": "tekton.dev/v1",
            "kind": "TaskRun",
            "metadata": {"name": "stack-probe", "namespace": "default"},
            "spec": {"taskSpec": {"steps": [{"name": "s", "image": "busybox", "script": "true"}]}},
        }

        async def admits() -> bool:
            try:
                out = await self.cluster.request(
                    "POST", "/apis/tekton.dev/v1/namespaces/default/taskruns?dryRun=All", probe
                )
            except RuntimeError:  # 500 until the webhook serves, 404 until the CRD does
                return False
            return bool(out["spec"].get("timeout"))

        await self._wait("tekton webhook", "to admit a dry-run TaskRun", admits, timeout, 0.2)

    # -- pieces ----------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        # SIGTERM, then SIGKILL after 1 s: Tekton's webhook drains for 10 s on SIGTERM
        # (measured: 10.01 s, every other child under 0.25 s), and nothing here is kept.
        try:
            return self._children.spawn(name, argv, env, grace=1.0)
        except OSError as exc:
            raise StackError(f"{name}: cannot start {argv[0]}: {exc}") from None

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
            raise StackError(
                f"{component}: timed out after {timeout:.0f}s waiting {what} "
                f"(log: {self.workdir / component}.log)"
            )

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
        self._spawn(
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
        self._spawn(
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
        self._spawn(
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

    async def _install_tekton(self, crds_parsed: asyncio.Future[list[JSON]]) -> None:
        c = self.cluster
        for doc in tekton_documents(
            self.tekton_config, "100-namespace/*.yaml", "200-*.yaml", "201-*.yaml",
            "clusterrole-aggregate-*.yaml", "config-*.yaml",
        ):
            if self._node_prepared is not None and doc["metadata"]["name"] == "config-defaults":
                # The real node has no pod network, only the host's loopback: every
                # TaskRun pod uses the host's network (kwok's pods are not changed by it).
                doc.setdefault("data", {})["default-pod-template"] = "hostNetwork: true\n"
            await c.apply(doc)
        # The webhook serves the certificate in its Secret: made for the Service's DNS
        # names (what the API server checks through the ExternalName Service) and 127.0.0.1.
        ca = make_ca("tekton-webhook-ca")
        service = f"{WEBHOOK_SERVICE}.{TEKTON_NS}.svc"
        serving = issue_serving_cert(
            ca, ["127.0.0.1", "localhost", service, service + ".cluster.local"]
        )
        self._webhook_ca = ca.cert_pem
        webhooks = tekton_documents(self.tekton_config, "500-webhooks.yaml")
        for doc in webhooks:
            if doc["kind"] == "Secret":
                doc["data"] = {"server-key.pem": _b64(serving.key_pem),
                               "server-cert.pem": _b64(serving.cert_pem),
                               "ca-cert.pem": _b64(ca.cert_pem)}
                await c.apply(doc)
        crds = await crds_parsed
        for crd in crds:
            conversion = crd["spec"].get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                client_config = conversion["webhook"]["clientConfig"]
                client_config["service"]["port"] = self.webhook_port
                # Tekton would set it too, but the API server may convert before it has
                # ("bad certificate").
                client_config["caBundle"] = _b64(self._webhook_ca)
        await asyncio.gather(*(c.apply(crd) for crd in crds))
        await self._crds_established([crd["metadata"]["name"] for crd in crds])
        for doc in webhooks:
            if doc["kind"] != "Secret":
                await c.apply(self._service_webhook(doc))
        await c.apply({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": WEBHOOK_SERVICE, "namespace": TEKTON_NS},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
                     "ports": [{"name": "https-webhook", "port": self.webhook_port}]},
        })
        for sa in (CONTROLLER_SA, WEBHOOK_SA):
            token = await c.request(
                "POST", f"/api/v1/namespaces/{TEKTON_NS}/serviceaccounts/{sa}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": 86400}},
            )
            self._kubeconfigs[sa] = write_token_kubeconfig(
                self.workdir / f"kubeconfig-{sa}", c.url, c.ca_file,
                f"system:serviceaccount:{TEKTON_NS}:{sa}", token["status"]["token"],
            )

    async def _crds_established(self, names: list[str]) -> None:
        """Polls each CRD by name: cheaper than listing all 1.4 MB of them."""
        pending = set(names)

        async def check() -> bool:
            for name in sorted(pending):
                crd = await self.cluster.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(x["type"] == "Established" and x["status"] == "True" for x in conditions):
                    pending.discard(name)
            return not pending

        await self._wait("kube-apiserver", "for Tekton's CRDs to be established", check, 60, 0.2)

    def _service_webhook(self, doc: JSON) -> JSON:
        """Tekton's webhook configuration as shipped, its Service port made the webhook's;
        Tekton's reconcilers fill in rules and path. The caBundle they would set too, but
        the API server may call before they have."""
        doc = copy.deepcopy(doc)
        for webhook in doc["webhooks"]:
            webhook["clientConfig"]["service"]["port"] = self.webhook_port
            webhook["clientConfig"]["caBundle"] = _b64(self._webhook_ca)
        return doc

    def _tekton_env(self, sa: str, leader_election: str, **extra: str) -> dict[str, str]:
        return base_env(
            KUBECONFIG=str(self._kubeconfigs[sa]),
            SYSTEM_NAMESPACE=TEKTON_NS,
            KUBERNETES_MIN_VERSION="v1.28.0",
            CONFIG_LOGGING_NAME="config-logging",
            CONFIG_OBSERVABILITY_NAME="config-observability",
            CONFIG_FEATURE_FLAGS_NAME="feature-flags",
            CONFIG_LEADERELECTION_NAME=leader_election,
            METRICS_DOMAIN="tekton.dev/pipeline",
            # Every listener on a free port. Probes and pprof bind ":PORT" (all interfaces:
            # neither Tekton nor knative takes a host); Prometheus takes one. knative's
            # hard-coded :8080 probe server may fail to bind when both run: harmless.
            PROBES_PORT=str(free_port()),
            PROFILING_PORT=str(free_port()),
            METRICS_PROMETHEUS_PORT=str(free_port()),
            METRICS_PROMETHEUS_HOST="127.0.0.1",
            **extra,
        )

    def start_tekton_controller(self) -> None:
        """Starts Tekton's controller (again). With `-disable-ha` it takes no leases, so a
        restart after a kill reconciles at once instead of waiting out the dead process's
        leases (knative's default lease is 60 s); one replica runs here anyway."""
        if self._tekton_controller is not None:
            return
        self._tekton_controller = self._spawn(
            "tekton-controller",
            [str(self._tekton_controller_bin), "-disable-ha",
             *(a for kv in {**fake_images(self.tekton_version), **self._tekton_images}.items()
               for a in kv)],
            self._tekton_env(
                CONTROLLER_SA,
                "config-leader-election-controller",
                CONFIG_DEFAULTS_NAME="config-defaults",
                CONFIG_SPIRE="config-spire",
                **self._controller_env,
            ),
        )

    def stop_tekton_controller(self, sig: int = signal.SIGKILL) -> None:
        """Stops Tekton's controller (SIGKILL by default: a crash). TaskRuns then stand
        still; pods run on under kwok."""
        if self._tekton_controller is not None:
            self._children.stop(self._tekton_controller, sig)
            self._tekton_controller = None

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

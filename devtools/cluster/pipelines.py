"""Tekton Pipelines, the real one, in the test stack: its webhook and controller as local
processes of the release hack/tekton/build made (the version hack/tekton/go.mod pins,
v1.12.0, or TEKTON_VERSION's: `make tekton-compat`), installed on a LocalCluster as its
release installs it, from that release's config/ in the Go module cache read at run
time: namespace, RBAC, config maps, CRDs and webhook configurations. The Tekton
stand-in, where no Tekton runs, is devtools.fakes.tekton.

Tekton runs under its own RBAC, with TokenRequest tokens of its ServiceAccounts. It
reaches its webhook the way a cluster does, through a Service reference, here the
ExternalName Service `tekton-pipelines-webhook` -> 127.0.0.1 on the webhook's port (the
API server resolves ExternalName to that host and checks the certificate against the
Service's DNS name). Tekton's own reconcilers then keep their webhook configurations
(rules, paths, caBundle) as they would in a cluster.

Invariants:
  * install() comes before start_webhook() and start_controller(): they run with the
    ServiceAccount tokens install() asked for;
  * the webhook keeps `webhook_port` across a stop and a start, the port its Service, its
    webhook configurations and Tekton's CRDs' conversion name;
  * the image flags nothing pulls (fake_images) are the controller's unless the stack's
    real node made Tekton's images (`images`);
  * a missing component, a process that cannot start or dies, or a wait that times out
    is one StackError line (devtools.hack), as everywhere in the stack.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from devtools import hack
from devtools.cluster.certs import issue_serving_cert, make_ca
from devtools.cluster.localcluster import LocalCluster, free_port, write_token_kubeconfig
from devtools.cluster.polling import wait_until
from devtools.cluster.processes import Child, Children, base_env
from devtools.hack import StackError

JSON = dict[str, Any]

TEKTON_NS = "tekton-pipelines"
WEBHOOK_SERVICE = "tekton-pipelines-webhook"
CONTROLLER_SA = "tekton-pipelines-controller"
WEBHOOK_SA = "tekton-pipelines-webhook"


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


def tekton_documents(config_dir: Path, *patterns: str) -> list[JSON]:
    """Tekton's manifests under `config_dir` matching `patterns`, in file order."""
    docs: list[JSON] = []
    for pattern in patterns:
        for path in sorted(config_dir.glob(pattern)):
            # libyaml: the CRDs are 1.4 MB, 4.8 s to parse in pure Python, 0.5 s in C.
            docs += [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d]
    return docs


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class TektonPipelines:
    """Tekton's webhook and controller on `cluster`, children of the stack's `children`
    (their logs `tekton-webhook.log` and `tekton-controller.log` in its folder)."""

    def __init__(self, cluster: LocalCluster, children: Children, *,
                 controller_env: Mapping[str, str] | None = None,
                 images: Mapping[str, str] | None = None,
                 host_network: bool = False) -> None:
        """`controller_env` adds to the controller's environment, e.g. KUBE_API_QPS /
        KUBE_API_BURST (knative reads them; Tekton doubles them). `images` are image
        flags over fake_images' (the real node's). `host_network`: every TaskRun pod
        uses the host's network (the real node has no pod network)."""
        bins = hack.build("tekton")
        self._webhook_bin = hack.need("tekton webhook", bins / "webhook")
        self._controller_bin = hack.need("tekton controller", bins / "controller")
        # The release built (hack/tekton/build: go.mod's pin, or TEKTON_VERSION's).
        self.version = hack.need("tekton version", bins / "version").read_text().strip()
        self.config = hack.need("tekton config", hack.build("tekton", "--config-dir"))
        self.cluster = cluster
        self._children = children
        self.images = {**fake_images(self.version), **(images or {})}
        self._host_network = host_network
        self._controller_env = dict(controller_env or {})
        self.webhook_port = free_port()
        self._webhook: Child | None = None
        self._controller: Child | None = None
        self._kubeconfigs: dict[str, Path] = {}
        self._webhook_ca = b""

    def read_crds(self) -> asyncio.Future[list[JSON]]:
        """Tekton's CRDs, parsed in a thread (0.5 s) while the caller does something else
        (the stack: etcd and the API server boot); for install()."""
        return asyncio.ensure_future(
            asyncio.to_thread(tekton_documents, self.config, "300-crds/*.yaml"))

    async def install(self, crds_parsed: asyncio.Future[list[JSON]]) -> None:
        """Tekton's release on the cluster, its CRDs established and its ServiceAccounts'
        tokens in kubeconfigs, ready for start_webhook() and start_controller()."""
        c = self.cluster
        for doc in tekton_documents(
            self.config, "100-namespace/*.yaml", "200-*.yaml", "201-*.yaml",
            "clusterrole-aggregate-*.yaml", "config-*.yaml",
        ):
            if self._host_network and doc["metadata"]["name"] == "config-defaults":
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
        webhooks = tekton_documents(self.config, "500-webhooks.yaml")
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
                self._children.folder / f"kubeconfig-{sa}", c.url, c.ca_file,
                f"system:serviceaccount:{TEKTON_NS}:{sa}", token["status"]["token"],
            )

    # -- its processes, stoppable by tests and the soak --------------------------------

    def start_webhook(self) -> None:
        """Starts the webhook (again) on the same port; await webhook_admits() for ready."""
        if self._webhook is not None:
            return
        self._webhook = self._children.spawn(
            "tekton-webhook",
            [str(self._webhook_bin)],
            self._env(
                WEBHOOK_SA,
                "config-leader-election-webhook",
                WEBHOOK_PORT=str(self.webhook_port),
                WEBHOOK_ADMISSION_CONTROLLER_NAME="webhook.pipeline.tekton.dev",
                WEBHOOK_SERVICE_NAME=WEBHOOK_SERVICE,
                WEBHOOK_SECRET_NAME="webhook-certs",
            ),
        )

    def stop_webhook(self) -> None:
        """Kills the webhook: TaskRun creates then fail with 500 "failed calling webhook"."""
        if self._webhook is not None:
            self._children.stop(self._webhook, signal.SIGKILL)
            self._webhook = None

    def start_controller(self) -> None:
        """Starts Tekton's controller (again). With `-disable-ha` it takes no leases, so a
        restart after a kill reconciles at once instead of waiting out the dead process's
        leases (knative's default lease is 60 s); one replica runs here anyway."""
        if self._controller is not None:
            return
        self._controller = self._children.spawn(
            "tekton-controller",
            [str(self._controller_bin), "-disable-ha",
             *(a for kv in self.images.items() for a in kv)],
            self._env(
                CONTROLLER_SA,
                "config-leader-election-controller",
                CONFIG_DEFAULTS_NAME="config-defaults",
                CONFIG_SPIRE="config-spire",
                **self._controller_env,
            ),
        )

    def stop_controller(self, sig: int = signal.SIGKILL) -> None:
        """Stops Tekton's controller (SIGKILL by default: a crash). TaskRuns then stand
        still; pods run on under kwok."""
        if self._controller is not None:
            self._children.stop(self._controller, sig)
            self._controller = None

    def stop(self) -> None:
        """Stops the controller, then the webhook, with SIGTERM (the stack's grace)."""
        self.stop_controller(signal.SIGTERM)
        if self._webhook is not None:
            self._children.stop(self._webhook)
            self._webhook = None

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

        if not await wait_until(admits, timeout, 0.2, alive=self._children.check_alive):
            raise StackError.timed_out("tekton webhook", "to admit a dry-run TaskRun", timeout,
                                       self._children.folder / "tekton-webhook.log")

    # -- pieces ----------------------------------------------------------------------

    async def _crds_established(self, names: list[str], timeout: float = 60.0) -> None:
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

        if not await wait_until(check, timeout, 0.2, alive=self._children.check_alive):
            raise StackError.timed_out("kube-apiserver", "for Tekton's CRDs to be established",
                                       timeout, self._children.folder / "kube-apiserver.log")

    def _service_webhook(self, doc: JSON) -> JSON:
        """Tekton's webhook configuration as shipped, its Service port made the webhook's;
        Tekton's reconcilers fill in rules and path. The caBundle they would set too, but
        the API server may call before they have."""
        doc = copy.deepcopy(doc)
        for webhook in doc["webhooks"]:
            webhook["clientConfig"]["service"]["port"] = self.webhook_port
            webhook["clientConfig"]["caBundle"] = _b64(self._webhook_ca)
        return doc

    def _env(self, sa: str, leader_election: str, **extra: str) -> dict[str, str]:
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

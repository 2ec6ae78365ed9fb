#!/usr/bin/env python3
"""Throwaway proof that real Tekton runs here: phase 1 of replacing TektonSimulator.

Starts, as local processes talking over loopback, from the binaries built by
hack/{localcluster,kwok,tekton}/build:
  etcd + kube-apiserver        (controller.devtools.localcluster.LocalCluster's pieces)
  kube-scheduler
  kwok                         fakes the kubelet of one Node, stages from hack/kwok/stages
  kube-controller-manager      garbagecollector, serviceaccount(-token), namespace,
                               root-ca-cert-publisher, each with its own SA credentials
  Tekton webhook + controller  under Tekton's own RBAC (a TokenRequest token of its
                               ServiceAccounts), config read from the Go module cache

then proves it end to end: a TaskRun runs to Succeeded with results; delays; the
webhook refuses a bad one; failing and OOM steps fail the TaskRun; a held pod waits
and is then evicted; cancel, timeout and garbage collection delete pods; without the
webhook creates get 500. Prints timings and each process's listening sockets (Tekton's
webhook, probe and pprof servers bind all interfaces: neither Tekton nor knative takes
a host for them). Not used by the tests; run it with the repo's venv:
  .venv/bin/python hack/prototype_stack.py [--keep] [--workdir DIR] [--webhook-via service]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from controller.devtools.certs import issue_serving_cert, make_ca
from controller.devtools.localcluster import (
    LocalCluster,
    _die_with_parent,
    free_port,
    write_token_kubeconfig,
)

HACK = Path(__file__).resolve().parent
STAGES = HACK / "kwok" / "stages"
TEKTON_NS = "tekton-pipelines"
NODE = "kwok-node-0"
# Only strings: the controller puts them in pod specs and nothing ever pulls them.
FAKE_IMAGES = {
    "-entrypoint-image": "registry.invalid/tekton/entrypoint:v1.10.3",
    "-nop-image": "registry.invalid/tekton/nop:v1.10.3",
    "-sidecarlogresults-image": "registry.invalid/tekton/sidecarlogresults:v1.10.3",
    "-workingdirinit-image": "registry.invalid/tekton/workingdirinit:v1.10.3",
    "-shell-image": "registry.invalid/busybox:latest",
    "-shell-image-win": "registry.invalid/powershell:nanoserver",
}
# Tekton's webhook registers exactly the served versions of its CRDs. Every type
# limits validation to CREATE/UPDATE (SupportedVerbs) except VerificationPolicy,
# which keeps knative's default of CREATE/UPDATE/DELETE.
VALIDATE_DELETE_TOO = {"verificationpolicies"}

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def build(component: str, *args: str) -> Path:
    out = subprocess.run(
        [str(HACK / component / "build"), *args], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])


class Proc:
    """A child process with its own env and log file (LocalCluster's _Process has no env)."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.name, self.argv, self.log_path, self.env = name, argv, log_path, env
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, preexec_fn=_die_with_parent,
            )

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{tail}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.popen = None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def base_env(**extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TZ") if k in os.environ}
    env.update(extra)
    return env


class Stack:
    def __init__(self, workdir: Path, webhook_via: str = "url") -> None:
        self.workdir = workdir
        self.webhook_via = webhook_via
        self.procs: list[Proc] = []
        t = time.monotonic()
        self.lc_bins = build("localcluster")
        self.kwok_bin = build("kwok") / "kwok"
        self.tekton_bins = build("tekton")
        self.tekton_config = build("tekton", "--config-dir")
        log(f"build scripts answered from cache in {time.monotonic() - t:.2f}s")
        self.cluster = LocalCluster(workdir / "cluster")
        self.webhook_port = free_port()
        self.session: aiohttp.ClientSession | None = None
        self.timings: dict[str, float] = {}

    # -- raw API access ---------------------------------------------------------------
    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        assert self.session is not None
        headers = {"Authorization": f"Bearer {self.cluster.admin.token}",
                   "Content-Type": content_type}
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        async with self.session.request(method, self.cluster.url + path, data=data,
                                        headers=headers, ssl=self.cluster.ssl_context()) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text) if text else None
            except ValueError:
                return r.status, text

    async def must(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, out = await self.call(method, path, body, **kw)
        if status >= 400:
            raise RuntimeError(f"{method} {path}: {status} {str(out)[:800]}")
        return out

    async def wait_for(self, what: str, check: Any, timeout: float = 60, every: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            for p in self.procs:
                p.check_alive()
            result = await check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            await asyncio.sleep(every)

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        p = Proc(name, argv, self.workdir / f"{name}.log", env)
        p.start()
        self.procs.append(p)
        return p

    # -- start-up -----------------------------------------------------------------------
    async def start(self) -> None:
        self.session = aiohttp.ClientSession()
        c = self.cluster
        t = time.monotonic()
        # Parse Tekton's CRDs while etcd and the API server boot.
        self.crds = asyncio.ensure_future(asyncio.to_thread(self.tekton_docs, "300-crds/*.yaml"))
        c._etcd.start()
        await c._wait_etcd()
        await c.start_apiserver()  # no apply_crds: the repo's permissive TaskRun CRD stays out
        self.timings["etcd+apiserver ready"] = time.monotonic() - t
        log("etcd and kube-apiserver ready")
        self.start_scheduler()
        self.start_kwok()
        await asyncio.gather(self.node_ready(), self.install_tekton())
        # The garbage collector learns of resources (TaskRuns) from discovery when it
        # starts and then only every 30 s: start it once every CRD is served, or deleting
        # a TaskRun leaves its pod for up to 30 s.
        self.start_controller_manager()
        self.start_tekton()
        await asyncio.gather(self.webhook_admits(), self.default_sa())
        self.timings["stack up"] = time.monotonic() - t
        log(f"stack up {self.timings['stack up']:.2f}s after starting etcd")
        for name, addrs in sorted(self.listeners().items()):
            log(f"  {name} listens on {', '.join(sorted(addrs))}")

    def kube_common_flags(self) -> list[str]:
        kc = str(self.cluster.kubeconfig)
        # The API server has no client CA, so there is no extension-apiserver-authentication
        # ConfigMap to look up: skip it rather than log its absence every few seconds.
        return [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}", "--authentication-skip-lookup=true",
                "--bind-address=127.0.0.1", "--leader-elect=false", "-v=1"]

    def start_controller_manager(self) -> None:
        c = self.cluster
        self.spawn("kube-controller-manager", [
            str(self.lc_bins / "kube-controller-manager"), *self.kube_common_flags(),
            f"--secure-port={free_port()}", f"--cert-dir={self.workdir / 'kcm-certs'}",
            "--controllers=garbagecollector,serviceaccount,serviceaccount-token,namespace,"
            "root-ca-cert-publisher",
            f"--service-account-private-key-file={c._sa_key}",
            f"--root-ca-file={c.ca_file}",
            "--use-service-account-credentials=true",
        ], base_env())

    def start_scheduler(self) -> None:
        self.spawn("kube-scheduler", [
            str(self.lc_bins / "kube-scheduler"), *self.kube_common_flags(),
            f"--secure-port={free_port()}", f"--cert-dir={self.workdir / 'scheduler-certs'}",
        ], base_env())

    def start_kwok(self) -> None:
        home = self.workdir / "kwok-home"  # kwok also loads ~/.kwok/kwok.yaml if it exists
        home.mkdir(exist_ok=True)
        stages = sorted(STAGES.glob("*.yaml"))
        self.spawn("kwok", [
            str(self.kwok_bin), f"--kubeconfig={self.cluster.kubeconfig}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.244.0.0/24", "--node-ip=10.96.0.10",
            *(f"--config={s}" for s in stages),
        ], base_env(HOME=str(home)))

    async def node_ready(self) -> None:
        t = time.monotonic()
        await self.must("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok"}},
        })

        async def ready() -> bool:
            node = await self.must("GET", f"/api/v1/nodes/{NODE}")
            conds = {x["type"]: x["status"] for x in node.get("status", {}).get("conditions", [])}
            return conds.get("Ready") == "True" and not node["spec"].get("taints")

        await self.wait_for("kwok to make the node Ready and untainted", ready)
        self.timings["node ready"] = time.monotonic() - t
        log("node Ready, not-ready taint gone (kwok)")

    async def default_sa(self) -> None:
        async def exists() -> bool:
            s, _ = await self.call("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            return s == 200
        await self.wait_for("the serviceaccount controller to make default/default", exists)

    # -- Tekton ---------------------------------------------------------------------------
    def tekton_docs(self, *names: str) -> list[dict[str, Any]]:
        docs = []
        for name in names:
            for path in sorted(self.tekton_config.glob(name)):
                # libyaml: the CRDs are 1.4 MB, 4.8 s to parse in pure Python, 0.5 s in C.
                docs += [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader)
                         if d]
        return docs

    async def install_tekton(self) -> None:
        t = time.monotonic()
        c = self.cluster
        for doc in self.tekton_docs("100-namespace/*.yaml", "200-*.yaml", "201-*.yaml",
                                    "clusterrole-aggregate-*.yaml", "config-*.yaml"):
            await c.apply(doc)
        log(f"  Tekton namespace, RBAC, config maps applied ({time.monotonic() - t:.2f}s)")
        # The webhook serves the certificate in its Secret; make it for 127.0.0.1 (and
        # the Service name, should the configurations ever point at a Service).
        ca = make_ca("tekton-webhook-ca")
        svc = f"tekton-pipelines-webhook.{TEKTON_NS}.svc"
        serving = issue_serving_cert(ca, ["127.0.0.1", "localhost", svc, svc + ".cluster.local"])
        self.webhook_ca = ca.cert_pem
        webhook_docs = self.tekton_docs("500-webhooks.yaml")
        for doc in webhook_docs:
            if doc["kind"] == "Secret":
                doc["data"] = {"server-key.pem": b64(serving.key_pem),
                               "server-cert.pem": b64(serving.cert_pem),
                               "ca-cert.pem": b64(ca.cert_pem)}
                await c.apply(doc)
        crds = await self.crds
        for crd in crds:
            conv = crd["spec"].get("conversion")
            if conv and conv.get("strategy") == "Webhook":
                if self.webhook_via == "url":
                    conv["webhook"]["clientConfig"] = self.client_config("/resource-conversion")
                else:
                    conv["webhook"]["clientConfig"]["service"]["port"] = self.webhook_port
                    conv["webhook"]["clientConfig"]["caBundle"] = b64(self.webhook_ca)
        await asyncio.gather(*(c.apply(crd) for crd in crds))
        log(f"  Tekton CRDs applied ({time.monotonic() - t:.2f}s)")
        await self.crds_established([crd["metadata"]["name"] for crd in crds])
        log(f"  Tekton CRDs established ({time.monotonic() - t:.2f}s)")
        for doc in webhook_docs:
            if doc["kind"] != "Secret":
                await c.apply(self.url_webhook_configuration(doc, crds)
                              if self.webhook_via == "url" else self.service_webhook(doc))
        if self.webhook_via == "service":
            await c.apply(self.external_name_service())
        self.timings["tekton config applied"] = time.monotonic() - t
        log("Tekton namespace, RBAC, config maps, CRDs, webhook configurations applied")
        self.kubeconfigs = {}
        for sa in ("tekton-pipelines-controller", "tekton-pipelines-webhook"):
            tr = await self.must(
                "POST", f"/api/v1/namespaces/{TEKTON_NS}/serviceaccounts/{sa}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": 86400}})
            self.kubeconfigs[sa] = write_token_kubeconfig(
                self.workdir / f"kubeconfig-{sa}", c.url, c.ca_file,
                f"system:serviceaccount:{TEKTON_NS}:{sa}", tr["status"]["token"])

    async def crds_established(self, names: list[str]) -> None:
        """Polls each CRD until Established; cheaper than listing all 1.4 MB of them."""
        pending = set(names)

        async def check() -> bool:
            for name in sorted(pending):
                crd = await self.must(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                if any(x["type"] == "Established" and x["status"] == "True"
                       for x in (crd.get("status") or {}).get("conditions") or []):
                    pending.discard(name)
            return not pending

        await self.wait_for(f"CRDs {sorted(pending)} established", check, 60, 0.2)

    def client_config(self, path: str) -> dict[str, Any]:
        return {"url": f"https://127.0.0.1:{self.webhook_port}{path}",
                "caBundle": base64.b64encode(self.webhook_ca).decode()}

    def external_name_service(self) -> dict[str, Any]:
        """The webhook Service as an ExternalName for 127.0.0.1: the API server resolves an
        ExternalName Service reference to that name and the Service port, and checks the
        certificate against tekton-pipelines-webhook.tekton-pipelines.svc."""
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "tekton-pipelines-webhook", "namespace": TEKTON_NS},
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
                         "ports": [{"name": "https-webhook", "port": self.webhook_port}]}}

    def service_webhook(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Tekton's configuration as shipped, its Service port made the webhook's port;
        Tekton's own reconcilers then fill in rules and path. The caBundle they would set
        too, but the API server may call before they have (conversion: "bad certificate")."""
        doc = copy.deepcopy(doc)
        for wh in doc["webhooks"]:
            wh["clientConfig"]["service"]["port"] = self.webhook_port
            wh["clientConfig"]["caBundle"] = b64(self.webhook_ca)
        return doc

    def url_webhook_configuration(self, doc: dict[str, Any], crds: list[dict[str, Any]]) -> Any:
        """What Tekton's webhook would write into its configurations, with a URL client config.

        Its reconcilers refuse a configuration without a Service reference ("missing
        service reference for webhook") and so never touch these: the rules, selectors
        and reinvocation policy they would set are written here instead.
        """
        doc = copy.deepcopy(doc)
        name = doc["metadata"]["name"]
        exclude = {"matchExpressions": [{"key": "webhooks.knative.dev/exclude",
                                         "operator": "DoesNotExist"}]}
        for wh in doc["webhooks"]:
            if name == "config.webhook.pipeline.tekton.dev":
                wh["clientConfig"] = self.client_config("/config-validation")
                wh["rules"] = [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""],
                                "apiVersions": ["v1"], "resources": ["configmaps/*"],
                                "scope": "Namespaced"}]
                continue
            mutating = doc["kind"] == "MutatingWebhookConfiguration"
            wh["clientConfig"] = self.client_config(
                "/defaulting" if mutating else "/resource-validation")
            wh["namespaceSelector"] = exclude
            if mutating:
                wh["reinvocationPolicy"] = "IfNeeded"
            rules = []
            for crd in crds:
                plural, group = crd["spec"]["names"]["plural"], crd["spec"]["group"]
                ops = ["CREATE", "UPDATE"]
                if not mutating and plural in VALIDATE_DELETE_TOO:
                    ops.append("DELETE")
                for v in crd["spec"]["versions"]:
                    if v.get("served"):
                        rules.append({"operations": ops, "apiGroups": [group],
                                      "apiVersions": [v["name"]],
                                      "resources": [plural, plural + "/status"]})
            wh["rules"] = sorted(rules, key=lambda r: (r["apiGroups"][0], r["apiVersions"][0],
                                                       r["resources"][0]))
        return doc

    def tekton_env(self, sa: str, leader_config: str, **extra: str) -> dict[str, str]:
        return base_env(
            KUBECONFIG=str(self.kubeconfigs[sa]),
            SYSTEM_NAMESPACE=TEKTON_NS,
            KUBERNETES_MIN_VERSION="v1.28.0",
            CONFIG_LOGGING_NAME="config-logging",
            CONFIG_OBSERVABILITY_NAME="config-observability",
            CONFIG_FEATURE_FLAGS_NAME="feature-flags",
            CONFIG_LEADERELECTION_NAME=leader_config,
            METRICS_DOMAIN="tekton.dev/pipeline",
            # Every listener on a free port: probes and pprof bind ":PORT" (all
            # interfaces, Tekton/knative take no host); Prometheus takes a host.
            PROBES_PORT=str(free_port()),
            PROFILING_PORT=str(free_port()),
            METRICS_PROMETHEUS_PORT=str(free_port()),
            METRICS_PROMETHEUS_HOST="127.0.0.1",
            **extra,
        )

    def start_tekton(self, which: tuple[str, ...] = ("webhook", "controller")) -> None:
        if "webhook" in which:
            self.webhook = self.spawn("tekton-webhook", [str(self.tekton_bins / "webhook")],
                                      self.tekton_env(
                "tekton-pipelines-webhook", "config-leader-election-webhook",
                WEBHOOK_PORT=str(self.webhook_port),
                WEBHOOK_ADMISSION_CONTROLLER_NAME="webhook.pipeline.tekton.dev",
                WEBHOOK_SERVICE_NAME="tekton-pipelines-webhook",
                WEBHOOK_SECRET_NAME="webhook-certs"))
        if "controller" in which:
            args = [a for kv in FAKE_IMAGES.items() for a in kv]
            self.spawn("tekton-controller", [str(self.tekton_bins / "controller"), *args],
                       self.tekton_env("tekton-pipelines-controller",
                                       "config-leader-election-controller",
                                       CONFIG_DEFAULTS_NAME="config-defaults",
                                       CONFIG_SPIRE="config-spire"))
        log(f"Tekton {' and '.join(which)} started (webhook on 127.0.0.1:{self.webhook_port})")

    async def webhook_admits(self) -> None:
        t = time.monotonic()

        async def admits() -> bool:
            status, out = await self.call(
                "POST", "/apis/tekton.dev/v1/namespaces/default/taskruns?dryRun=All",
                taskrun("probe"))
            # Defaulted (a timeout set) proves the mutating webhook ran, not just the API.
            return status == 201 and bool(out["spec"].get("timeout"))

        await self.wait_for("Tekton's webhook to admit a dry-run TaskRun", admits, 60, 0.2)
        self.timings["webhook admits"] = time.monotonic() - t
        log("Tekton webhook admits TaskRuns")

    def listeners(self) -> dict[str, list[str]]:
        """Each child's listening TCP sockets, from ss(8)."""
        pids = {p.popen.pid: p.name for p in self.procs if p.popen is not None}
        pids[self.cluster._apiserver._popen.pid] = "kube-apiserver"  # type: ignore[union-attr]
        pids[self.cluster._etcd._popen.pid] = "etcd"  # type: ignore[union-attr]
        out: dict[str, list[str]] = {}
        ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
        for line in ss.splitlines():
            fields = line.split()
            for pid, name in pids.items():
                if f"pid={pid}," in line:
                    out.setdefault(name, []).append(fields[3])
        return out

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.cluster.stop()


def taskrun(name: str, *, annotations: dict[str, str] | None = None,
            script: str = "echo -n sha256:0123abcd > $(results.shp-image-digest.path)") -> Any:
    return {
        "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {"taskSpec": {
            "results": [{"name": "shp-image-digest"}, {"name": "shp-image-size"}],
            "steps": [
                {"name": "build", "image": "busybox", "script": "echo building"},
                {"name": "push", "image": "busybox", "script": script},
            ]}},
    }


async def prove(s: Stack) -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    path = "/apis/tekton.dev/v1/namespaces/default/taskruns"

    def record(name: str, ok: bool, detail: str) -> None:
        out.append((name, ok, detail))
        log(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    async def finished(name: str, timeout: float = 60) -> Any:
        async def done() -> Any:
            tr = await s.must("GET", f"{path}/{name}")
            for cond in tr.get("status", {}).get("conditions", []):
                if cond["type"] == "Succeeded" and cond["status"] != "Unknown":
                    return tr
            return None
        return await s.wait_for(f"TaskRun {name} to finish", done, timeout)

    # 1. Success with results, through webhook defaulting, Tekton, scheduler and kwok.
    t = time.monotonic()
    results = {"shp-image-digest": "sha256:0123abcd", "shp-image-size": "4242"}
    created = await s.must("POST", path, taskrun("ok", annotations={
        "buildrun-controller.test/results": json.dumps(results)}))
    defaulted = created["spec"].get("timeout") and created["spec"].get("serviceAccountName")
    tr = await finished("ok")
    e2e = time.monotonic() - t
    cond = tr["status"]["conditions"][0]
    pod = await s.must("GET", f"/api/v1/namespaces/default/pods/{tr['status']['podName']}")
    got = {r["name"]: r["value"] for r in tr["status"].get("results", [])}
    steps = [(st["name"], st.get("terminated", {}).get("exitCode"),
              st.get("terminated", {}).get("reason")) for st in tr["status"].get("steps", [])]
    record("success", bool(defaulted) and cond["status"] == "True" and got == results
           and pod["spec"].get("nodeName") == NODE and all(x[1] == 0 for x in steps),
           f"defaulted timeout={created['spec'].get('timeout')} "
           f"sa={created['spec'].get('serviceAccountName')}; {cond['reason']}; pod on "
           f"{pod['spec'].get('nodeName')} {pod['status']['phase']}; results={got}; "
           f"steps={steps}; create->Succeeded {e2e:.2f}s")
    s.timings["first TaskRun create->Succeeded"] = e2e

    # Delays chosen through annotations: 1 s Pending, then 1 s running.
    t = time.monotonic()
    await s.must("POST", path, taskrun("slow", annotations={
        "buildrun-controller.test/start-delay": "1s",
        "buildrun-controller.test/run-duration": "1s"}))
    tr = await finished("slow")
    took = time.monotonic() - t
    record("delays", tr["status"]["conditions"][0]["status"] == "True" and took >= 2.0,
           f"create->Succeeded {took:.2f}s with start-delay 1s, run-duration 1s")

    # 2. Refused by Tekton's validating webhook.
    status, body = await s.call("POST", path, taskrun("bad", script="echo $(params.nope)"))
    msg = body.get("message", "") if isinstance(body, dict) else str(body)
    record("webhook refuses", status in (400, 422) and "params.nope" in msg,
           f"HTTP {status}: {msg[:300]}")

    # 3. A failing step, 4. OOM: TaskRun Failed.
    for fate, extra in (("fail", {"buildrun-controller.test/exit-code": "3"}), ("oom", {})):
        await s.must("POST", path, taskrun(fate, annotations={
            "buildrun-controller.test/fate": fate, **extra}))
        tr = await finished(fate)
        cond = tr["status"]["conditions"][0]
        steps = [(st["name"], st.get("terminated", {}).get("exitCode"),
                  st.get("terminated", {}).get("reason")) for st in tr["status"]["steps"]]
        record(f"step {fate}", cond["status"] == "False",
               f"{cond['reason']}: {cond.get('message', '')[:200]}; steps={steps}")

    # 5. Held until the test patches the pod, 6. then evicted.
    await s.must("POST", path,
                 taskrun("held", annotations={"buildrun-controller.test/fate": "hold"}))

    async def running_pod() -> Any:
        tr = await s.must("GET", f"{path}/held")
        pod_name = tr.get("status", {}).get("podName")
        if not pod_name:
            return None
        pod = await s.must("GET", f"/api/v1/namespaces/default/pods/{pod_name}")
        return pod if pod["status"].get("phase") == "Running" else None

    pod = await s.wait_for("the held pod to run", running_pod)
    await asyncio.sleep(1.0)
    tr = await s.must("GET", f"{path}/held")
    still = tr["status"]["conditions"][0]
    await s.must("PATCH", f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}",
                 {"metadata": {"annotations": {"buildrun-controller.test/fate": "evict"}}},
                 content_type="application/merge-patch+json")
    tr = await finished("held")
    cond = tr["status"]["conditions"][0]
    record("hold then evict", still["status"] == "Unknown" and cond["status"] == "False",
           f"held: {still['reason']}; after evict: {cond['reason']}: "
           f"{cond.get('message', '')[:200]}")

    # Cancel, timeout, and deleting a TaskRun: its pod is deleted (by Tekton, or by the
    # garbage collector through the owner reference) and kwok confirms the deletion.
    async def pod_gone(pod_name: str) -> bool:
        status, _ = await s.call("GET", f"/api/v1/namespaces/default/pods/{pod_name}")
        return status == 404

    async def pod_of(name: str) -> str:
        async def has_pod() -> Any:
            tr = await s.must("GET", f"{path}/{name}")
            return tr.get("status", {}).get("podName")
        return str(await s.wait_for(f"a pod for {name}", has_pod))

    hold = {"buildrun-controller.test/fate": "hold"}
    await s.must("POST", path, taskrun("cancelled", annotations=hold))
    pod_name = await pod_of("cancelled")
    await s.must("PATCH", f"{path}/cancelled", {"spec": {"status": "TaskRunCancelled"}},
                 content_type="application/merge-patch+json")
    tr = await finished("cancelled")
    cond = tr["status"]["conditions"][0]
    gone = await s.wait_for("the cancelled TaskRun's pod to go", lambda: pod_gone(pod_name), 30)
    record("cancel", cond["reason"] == "TaskRunCancelled" and gone,
           f"{cond['reason']}; pod deleted")

    timed = taskrun("timeout", annotations=hold)
    timed["spec"]["timeout"] = "2s"
    await s.must("POST", path, timed)
    pod_name = await pod_of("timeout")
    tr = await finished("timeout", 30)
    cond = tr["status"]["conditions"][0]
    gone = await s.wait_for("the timed-out TaskRun's pod to go", lambda: pod_gone(pod_name), 30)
    record("timeout", cond["reason"] == "TaskRunTimeout" and gone,
           f"{cond['reason']}: {cond.get('message', '')[:120]}; pod deleted")

    await s.must("POST", path, taskrun("deleted", annotations=hold))
    pod_name = await pod_of("deleted")
    await s.must("DELETE", f"{path}/deleted")
    t = time.monotonic()
    await s.wait_for("the garbage collector to delete the pod", lambda: pod_gone(pod_name), 60)
    record("garbage collection", True,
           f"pod gone {time.monotonic() - t:.2f}s after its TaskRun was deleted")

    # 7. No webhook: creates fail with 500 "failed calling webhook"; then it comes back.
    s.webhook.stop(signal.SIGKILL)
    status, body = await s.call("POST", path, taskrun("nowebhook"))
    msg = body.get("message", "") if isinstance(body, dict) else str(body)
    record("webhook down", status == 500 and "failed calling webhook" in msg,
           f"HTTP {status}: {msg[:250]}")
    t = time.monotonic()
    s.procs.remove(s.webhook)
    s.start_tekton(("webhook",))
    await s.webhook_admits()
    record("webhook restarted", True, f"admitting again after {time.monotonic() - t:.2f}s")

    # 8. Tekton's webhook reconcilers own these objects by name but refuse URL client
    # configs ("missing service reference"), so they must still hold ours. With a
    # Service reference they fill in rules, path and caBundle themselves.
    await asyncio.sleep(2)
    urls = []
    for kind, name in (("mutatingwebhookconfigurations", "webhook.pipeline.tekton.dev"),
                       ("validatingwebhookconfigurations",
                        "validation.webhook.pipeline.tekton.dev"),
                       ("validatingwebhookconfigurations", "config.webhook.pipeline.tekton.dev")):
        obj = await s.must("GET", f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}")
        urls += [(wh["clientConfig"].get("url") or wh["clientConfig"]["service"].get("path"),
                  len(wh.get("rules") or [])) for wh in obj["webhooks"]]
    crd = await s.must("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                       "taskruns.tekton.dev")
    conv = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    urls.append((conv.get("url") or conv["service"].get("path"), 0))
    if s.webhook_via == "url":
        record("URL client configs kept", all(u and u.startswith("https://127.0.0.1:")
                                              for u, _ in urls), f"(url, rules)={urls}")
    else:
        record("Tekton reconciled its configurations", all(u for u, _ in urls)
               and all(n for _, n in urls[:3]), f"(path, rules)={urls}")
    return out


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true", help="leave the workdir (logs) behind")
    ap.add_argument("--webhook-via", choices=("url", "service"), default="url",
                    help="url: URL client configs, written whole here (default); service: "
                    "Tekton's own configurations through an ExternalName Service")
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="prototype-stack-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"workdir {workdir}")
    stack = Stack(workdir, args.webhook_via)
    try:
        await stack.start()
        results = await prove(stack)
    finally:
        stack.stop()
        if stack.session:
            await stack.session.close()
    for k, v in stack.timings.items():
        print(f"  {k:36s} {v:6.2f}s")
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    if not args.keep and not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

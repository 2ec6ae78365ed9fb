"""A real Prometheus for the dashboard's picture and the in-cluster test, and what both ask
of it: every panel's queries of manifests/grafana/dashboard.json evaluated over a run.

`Prometheus(workdir, scrape_configs)` runs the binary tests/promtools.py builds; given a
network namespace (`netns`, a /proc/PID/ns/net such as the real node's) it runs there,
so it reaches pod addresses as a Prometheus in the cluster does, and is queried from the
host through devtools.cluster.netns.serve_into. `static_scrape` is the render's scrape
(fixed targets); `service_monitor_scrape` is what the Prometheus Operator generates from
manifests/monitoring's ServiceMonitor: Kubernetes service discovery of the Service's
endpoints and the Operator's relabelling. `evaluate` runs every panel's queries.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from devtools.cluster.localcluster import free_port
from devtools.cluster.netns import serve_into
from devtools.cluster.processes import die_with_parent
from tests.promtools import prometheus_binary

JSON = dict[str, Any]
# Grafana's $__rate_interval, as the picture takes it (1 s scrapes: four of them and more).
RATE_INTERVAL = "10s"
# Query results by (panel id, target refId): Prometheus' `result` lists.
Results = dict[tuple[int, str], list[dict[str, Any]]]


def static_scrape(job: str, targets: list[str], labels: dict[str, str]) -> JSON:
    """A scrape config of fixed `targets` (host:port), each series labelled `labels`."""
    return {"job_name": job, "static_configs": [{"targets": targets, "labels": labels}]}


def _label(name: str) -> str:
    """A Kubernetes label name as Prometheus' service discovery spells it in a meta label."""
    return "".join(c if c.isalnum() else "_" for c in name)


def service_monitor_scrape(monitor: JSON, *, api_server: str, ca_file: Path,
                           token_file: Path, interval: str) -> list[JSON]:
    """The scrape configs the Prometheus Operator generates from ServiceMonitor `monitor`
    (its `generateServiceMonitorConfig`, with `serviceDiscoveryRole: EndpointSlice`): one
    job per endpoint, Kubernetes service discovery of the EndpointSlices in the monitor's
    namespaces, kept where the Service's labels match its selector and the port's name is
    the endpoint's, labelled namespace, service, pod, container, endpoint and job (the
    Service's name) as the Operator labels them. Discovery talks to `api_server` with the
    ServiceAccount token in `token_file`, as the Operator's Prometheus does in-cluster.
    `interval` replaces the endpoint's own, so that a short run has enough samples."""
    spec = monitor["spec"]
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") \
        or [monitor["metadata"]["namespace"]]
    keep = [{"action": "keep",
             "source_labels": [f"__meta_kubernetes_service_label_{_label(k)}",
                               f"__meta_kubernetes_service_labelpresent_{_label(k)}"],
             "regex": f"({v});true"}
            for k, v in sorted(spec["selector"]["matchLabels"].items())]
    configs = []
    for i, endpoint in enumerate(spec["endpoints"]):
        target = "__meta_kubernetes_endpointslice_address_target_"
        configs.append({
            "job_name": f"serviceMonitor/{monitor['metadata']['namespace']}/"
                        f"{monitor['metadata']['name']}/{i}",
            "honor_labels": False,
            "kubernetes_sd_configs": [{
                "role": "endpointslice", "api_server": api_server,
                "namespaces": {"names": namespaces},
                "tls_config": {"ca_file": str(ca_file)},
                "authorization": {"credentials_file": str(token_file)}}],
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "metrics_path": endpoint.get("path", "/metrics"),
            "scheme": endpoint.get("scheme", "http"),
            "relabel_configs": [
                {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
                *keep,
                {"action": "keep", "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
                 "regex": endpoint["port"]},
                {"source_labels": [f"{target}kind", f"{target}name"], "separator": ";",
                 "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
                {"source_labels": [f"{target}kind", f"{target}name"], "separator": ";",
                 "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                {"source_labels": ["__meta_kubernetes_pod_container_name"],
                 "target_label": "container"},
                {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                 "regex": "(Failed|Succeeded)"},
                {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
                 "replacement": "${1}"},
                {"target_label": "endpoint", "replacement": endpoint["port"]},
            ],
        })
    return configs


@dataclass
class Prometheus:
    """A Prometheus scraping `scrape_configs` every second (a config's own interval
    wins), its data in `workdir`; in network namespace `netns` when given. `url` is where
    this process queries it."""
    workdir: Path
    scrape_configs: list[JSON]
    netns: Path | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    _forward: asyncio.Server | None = None
    _url_port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._url_port or self.port}"

    def spawn(self) -> None:
        binary = prometheus_binary("prometheus")
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                       "evaluation_interval": "1s"},
            "scrape_configs": self.scrape_configs,
        }))
        enter = ["nsenter", f"--net={self.netns}", "--"] if self.netns else []
        log = (self.workdir / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [*enter, str(binary), f"--config.file={config}",
             f"--storage.tsdb.path={self.workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )

    async def start(self) -> None:
        self.spawn()
        if self.netns is not None:
            self._forward = await serve_into(self.netns, self.port)
            self._url_port = self._forward.sockets[0].getsockname()[1]
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(f"{self.url}/-/ready") as r:
                        if r.status == 200:
                            return
                if self.proc is not None and self.proc.poll() is not None:
                    break
                await asyncio.sleep(0.2)
        raise TimeoutError(f"Prometheus did not become ready (log: {self.workdir}/prometheus.log)")

    def stop(self) -> None:
        if self._forward is not None:
            self._forward.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    async def _get(self, path: str, params: dict[str, str]) -> Any:
        async with aiohttp.ClientSession() as s, s.get(f"{self.url}{path}", params=params) as r:
            body = await r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"{params}: {body}")
        return body["data"]

    async def query_range(self, expr: str, start: float, end: float,
                          step: float = 1.0) -> list[dict[str, Any]]:
        data = await self._get("/api/v1/query_range", {
            "query": expr, "start": str(start), "end": str(end), "step": str(step)})
        result: list[dict[str, Any]] = data["result"]
        return result

    async def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        data = await self._get("/api/v1/query", {"query": expr, "time": str(at)})
        result: list[dict[str, Any]] = data["result"]
        return result

    async def targets(self) -> list[JSON]:
        """The active targets (/api/v1/targets), each with its labels and health."""
        data = await self._get("/api/v1/targets", {"state": "active"})
        active: list[JSON] = data["activeTargets"]
        return active


def expand(expr: str, seconds: float) -> str:
    """`expr` with the Grafana variables the dashboard uses replaced, for a run of
    `seconds`."""
    return (expr.replace("$__rate_interval", RATE_INTERVAL)
            .replace("$__range", f"{max(int(seconds), 1)}s"))


async def evaluate(dashboard: JSON, prometheus: Prometheus, start: float, end: float
                   ) -> tuple[Results, Results]:
    """Every panel's queries over [start, end] (wall-clock seconds): (time series of the
    time-series panels, by query_range at 1 s steps; the stat panels' values at `end`).
    A query Prometheus cannot evaluate raises."""
    series: Results = {}
    stats: Results = {}
    for p in dashboard["panels"]:
        for t in p["targets"]:
            expr = expand(t["expr"], end - start)
            if p["type"] == "stat":
                stats[(p["id"], t["refId"])] = await prometheus.query(expr, end)
            else:
                series[(p["id"], t["refId"])] = await prometheus.query_range(expr, start, end)
    return series, stats

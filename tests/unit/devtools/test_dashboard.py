"""devtools.dashboard: the renderer of docs/dashboard.png imports, starts its replicas with
flags the controller takes, sends Prometheus only queries it can evaluate, and draws the
dashboard from query results (a small sample of their shape, made here: no run).

The whole run (API server, two replicas, Prometheus) is `python -m
devtools.dashboard.render`; nothing here starts it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from controller.cli import parser, settings_from
from devtools.dashboard import prometheus, render
from devtools.hack import REPO


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(render.DASHBOARD.read_text())
    return data


def test_the_replicas_flags_are_the_controllers(tmp_path: Path) -> None:
    replica = render.Replica("replica-a", tmp_path / "kubeconfig", tmp_path, metrics_port=9000)
    settings = settings_from(parser().parse_args(replica.flags()))
    assert settings.namespace == render.NS
    assert settings.workers == 2
    assert settings.metrics_address == "127.0.0.1:9000"
    assert settings.budget.max_retries == 6
    assert settings.leader_election is not None
    assert settings.leader_election.namespace == "buildrun-controller"
    assert settings.leader_election.lease_duration == 4


def test_every_panel_query_is_sent_without_grafana_variables() -> None:
    """Prometheus knows no $__ variable: `expand` replaces each one the dashboard uses."""
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    assert exprs
    left = [e for e in exprs if "$__" in prometheus.expand(e, 150.0)]
    assert not left, left


def test_a_legend_is_filled_from_the_series_labels() -> None:
    labels = {"instance": "a", "result": "error"}
    assert render.legend("{{instance}} {{result}}", labels) == "a error"


def sample(board: dict[str, Any], t0: float, seconds: int) -> tuple[
        dict[tuple[int, str], list[dict[str, Any]]], dict[tuple[int, str], list[dict[str, Any]]]]:
    """Query results of Prometheus' shape for every target of every panel: one series
    per time-series target (its labels the legend's), one value per stat."""
    series: dict[tuple[int, str], list[dict[str, Any]]] = {}
    stats: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for panel in board["panels"]:
        for n, target in enumerate(panel["targets"]):
            key = (panel["id"], target["refId"])
            if panel["type"] == "stat":
                stats[key] = [{"metric": {}, "value": [t0 + seconds, "1"]}]
                continue
            labels = {"instance": "127.0.0.1:9000", "result": "success",
                      "reason": "Succeeded", "error_class": "webhook"}
            values = [[t0 + s, str(0.01 * (n + 1) * (1 + s % 7))] for s in range(seconds)]
            series[key] = [{"metric": labels, "values": values}]
    return series, stats


def test_draws_every_panel_from_query_results(tmp_path: Path) -> None:
    board = dashboard()
    t0 = 1_800_000_000.0
    series, stats = sample(board, t0, 30)
    out = tmp_path / "dashboard.png"
    render.draw(board, series, stats, t0, t0 + 30, {"burst of 25": (10.0, 12.0)}, out,
                "a sample")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def service_monitor() -> dict[str, Any]:
    monitor: dict[str, Any] = yaml.safe_load(
        (REPO / "manifests" / "monitoring" / "service_monitor.yaml").read_text())
    return monitor


def relabel(rules: list[dict[str, Any]], meta: dict[str, str]) -> dict[str, str] | None:
    """Prometheus' relabelling, the actions the Operator's config uses (replace, keep,
    drop), over a target's labels: the labels kept, or None if the target is dropped."""
    labels = dict(meta)
    for rule in rules:
        value = rule.get("separator", ";").join(labels.get(s, "")
                                                for s in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        action = rule.get("action", "replace")
        if action == "keep" and not match:
            return None
        if action == "drop" and match:
            return None
        if action == "replace" and match:
            labels[rule["target_label"]] = match.expand(
                rule.get("replacement", "$1").replace("${1}", r"\1").replace("$1", r"\1"))
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def test_the_service_monitors_scrape_keeps_the_metrics_port_of_the_metrics_service() -> None:
    """The Operator's equivalent of manifests/monitoring's ServiceMonitor: service discovery
    of its namespace's EndpointSlices, the Service's labels and port name matched as its
    selector and endpoint say, the target labelled as the Operator labels it."""
    (job,) = prometheus.service_monitor_scrape(
        service_monitor(), api_server="https://10.0.0.1:443", ca_file=Path("/ca.crt"),
        token_file=Path("/token"), interval="1s")
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "endpointslice"
    assert sd["namespaces"] == {"names": ["buildrun-controller"]}
    assert (job["metrics_path"], job["scheme"], job["scrape_interval"]) == ("/metrics", "http",
                                                                           "1s")
    meta = {"__address__": "10.88.0.5:8080", "job": job["job_name"],
            "__meta_kubernetes_namespace": "buildrun-controller",
            "__meta_kubernetes_service_name": "buildrun-controller-metrics",
            "__meta_kubernetes_service_label_app_kubernetes_io_name": "buildrun-controller",
            "__meta_kubernetes_service_labelpresent_app_kubernetes_io_name": "true",
            "__meta_kubernetes_service_label_app_kubernetes_io_component": "metrics",
            "__meta_kubernetes_service_labelpresent_app_kubernetes_io_component": "true",
            "__meta_kubernetes_endpointslice_port_name": "metrics",
            "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
            "__meta_kubernetes_endpointslice_address_target_name": "controller-abc",
            "__meta_kubernetes_pod_name": "controller-abc",
            "__meta_kubernetes_pod_container_name": "controller",
            "__meta_kubernetes_pod_phase": "Running"}
    kept = relabel(job["relabel_configs"], meta)
    assert kept is not None
    assert {k: kept[k] for k in ("namespace", "service", "pod", "container", "endpoint",
                                 "job")} == {
        "namespace": "buildrun-controller", "service": "buildrun-controller-metrics",
        "pod": "controller-abc", "container": "controller", "endpoint": "metrics",
        "job": "buildrun-controller-metrics"}
    # Another port of the Service, another Service's labels, a finished pod: not scraped.
    for other in ({"__meta_kubernetes_endpointslice_port_name": "probes"},
                  {"__meta_kubernetes_service_label_app_kubernetes_io_component": "controller"},
                  {"__meta_kubernetes_service_labelpresent_app_kubernetes_io_name": "false"},
                  {"__meta_kubernetes_pod_phase": "Succeeded"}):
        assert relabel(job["relabel_configs"], meta | other) is None, other

"""devtools.dashboard: the renderer of docs/dashboard.png imports, starts its replicas with
flags the controller takes, sends Prometheus only queries it can evaluate, and draws the
dashboard from query results (a small sample of their shape, made here: no run).

The whole run (API server, two replicas, Prometheus) is `python -m
devtools.dashboard.render`; nothing here starts it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from controller.cli import parser, settings_from
from devtools.dashboard import render


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
    left = [e for e in exprs if "$__" in render.expand(e, 150.0)]
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

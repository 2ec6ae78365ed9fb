"""The dashboard, the alerts and docs/metrics.md name only metrics the controller exports.

A controller runs one BuildRun through a flaky webhook (so a retry is counted),
one with a missing Build, two of a Build with the Serial run policy (the first's run
left waiting, the second queued behind it: the waiting and serial-queue gauges), with
--failure-log-snippet on, and holds a Lease, then /metrics is scraped over HTTP.
Every name a dashboard panel or an alert selects must be a sample in that
scrape, with the suffix its type gives it (counters end in _total, histograms
are read through _bucket/_sum/_count).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.buildrun import reasons
from controller.buildrun.annotations import RUN_POLICY
from controller.runtime.kube import Kube
from controller.settings import LeaderElectionSettings, LogSnippetSettings
from controller.shipwright.resources import BUILDS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.fakes.webhook import FlakyWebhook, Verdict
from tests.doctext import section
from tests.harness import (
    World,
    condition,
    controller_settings,
    running_controller,
    scrape,
    wait_for,
)
from tests.promtools import family_of, metric_names, parse_exposition

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "manifests" / "grafana" / "dashboard.json"
RULES = REPO / "manifests" / "monitoring" / "prometheus_rule.yaml"

# Labelled families whose first sample appears only with the event they count,
# which no honest scenario can cause on purpose. They must still be declared
# (# TYPE in the scrape), with the right type for the suffix used.
DECLARED_ONLY = {
    "controller_runtime_terminal_reconcile_errors_total":
        "needs an API answer the controller cannot retry (400/422 to its own write)",
    "controller_runtime_reconcile_panics_total": "needs a bug in a reconciler",
    "buildrun_infrastructure_retries_total":
        "needs a run the infrastructure failed (tests/cluster/test_real_builds.py evicts one "
        "on the real node and reads this counter)",
    "buildrun_serial_superseded_total":
        "needs a SerialLatestOnly Build's queue (tests/cluster/test_serial.py)",
}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p["targets"]]


def rule_exprs() -> list[tuple[str, str]]:
    rule = yaml.safe_load(RULES.read_text())
    return [(r.get("alert") or r["record"], str(r["expr"]))
            for g in rule["spec"]["groups"] for r in g["rules"]]


def test_metric_names_reads_promql() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{name="x",le!="1e3"}[5m])))'
    ) == {"a_bucket"}
    assert metric_names(
        "sum by (namespace) (rate(a_total[$__rate_interval])) / on (instance) group_left "
        "max(b) > 1e3 and c offset 5m or absent(d{x=\"y\"}) unless bool e"
    ) == {"a_total", "b", "c", "d", "e"}


def test_dashboard_is_well_formed() -> None:
    d = dashboard()
    assert d["uid"] == "buildrun-controller"
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p["description"], p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["refId"], p["title"]
    names = {n for _, e in dashboard_exprs() for n in metric_names(e)}
    # What an SRE looks for first must be there.
    assert {
        "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
        "controller_runtime_terminal_reconcile_errors_total", "buildrun_retries_total",
        "workqueue_depth", "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket", "buildrun_completed_total",
        "leader_election_master_status",
    } <= names
    quantiles = [e for _, e in dashboard_exprs() if e.startswith("histogram_quantile(")]
    assert {m for e in quantiles for m in metric_names(e)} == {
        "workqueue_queue_duration_seconds_bucket", "workqueue_work_duration_seconds_bucket"}


async def _namespace(kube: Kube) -> str:
    name = f"dash-{uuid.uuid4().hex[:8]}"
    await fixtures.create_namespace(kube, name)
    return name


@pytest.fixture(scope="module")
async def scraped(cluster: LocalCluster, kube: Kube) -> AsyncIterator[str]:
    """/metrics of a leader that ran a BuildRun through one webhook timeout."""
    ns = await _namespace(kube)
    world = World(kube, ns)
    await world.strategy()
    await world.build()

    def script(call: int) -> Verdict:
        return "timeout" if call == 1 else "allow"

    await world.build("serial")
    await kube.patch(BUILDS, ns, "serial", {"metadata": {"annotations": {
        RUN_POLICY: "Serial"}}})
    leader = LeaderElectionSettings(namespace=ns, name="buildrun-controller",
                                    identity="dashboard-test")
    settings = controller_settings(cluster, ns, leader_election=leader,
                                   log_snippet=LogSnippetSettings())
    async with FlakyWebhook(cluster, ns, script) as webhook, \
            running_controller(settings) as app:
        await world.buildrun("flaky")
        await world.taskrun_of("flaky", timeout=30)
        assert condition(await world.finished("flaky", 30))["reason"] == "Succeeded"
        await world.buildrun("no-build", build_ref="does-not-exist")
        assert condition(await world.finished("no-build"))["reason"] == "BuildNotFound"
        assert webhook.verdicts[:2] == ["timeout", "allow"]
        # No Tekton here: the first's TaskRun never runs, so it waits (Pending) and the
        # second waits behind it.
        await world.buildrun("serial-1", build_ref="serial")
        await world.taskrun_of("serial-1", timeout=30)
        await world.buildrun("serial-2", build_ref="serial")

        async def queued() -> bool:
            cond = condition(await world.get("serial-2"))
            return bool(cond) and cond["reason"] == reasons.SERIAL_RUN_WAITING
        await wait_for(queued, 30, what="serial-2 to wait behind serial-1")
        yield await scrape(app)
    await kube.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_queried_metric_is_exported(scraped: str, source: str) -> None:
    types, samples = parse_exposition(scraped)
    exprs = dashboard_exprs() if source == "dashboard" else rule_exprs()
    missing: list[str] = []
    for where, expr in exprs:
        for name in sorted(metric_names(expr)):
            family = family_of(name, types)
            if family is None:
                missing.append(f"{where}: {name} is not a declared family "
                               f"(declared: {sorted(k for k in types if name[:8] in k)})")
            elif name not in samples and name not in DECLARED_ONLY:
                missing.append(f"{where}: {name} is declared but has no sample")
    assert not missing, "\n".join(missing)


def test_leader_metric_is_exported_as_the_alert_expects(scraped: str) -> None:
    assert re.search(r'^leader_election_master_status\{name="buildrun-controller"\} 1\.0$',
                     scraped, re.M), scraped


def documented_metrics() -> set[str]:
    """The metric names in docs/metrics.md's table (first column), less process_*/python_*,
    which share one row."""
    table = section("docs/metrics.md", "Metrics")
    names = set(re.findall(r"^\| `([a-z_:][a-z0-9_:]*)` \|", table, re.M))
    assert len(names) > 20, "docs/metrics.md's metrics table moved"
    return names


def test_the_metrics_table_lists_every_exported_metric(scraped: str) -> None:
    """Every family the controller exports has a row, and every row is exported.
    prometheus-client's own process_* and python_* families share one row."""
    types, _ = parse_exposition(scraped)
    exported = {n for n in types if not n.startswith(("process_", "python_"))}
    # prometheus-client's creation-time companions of counters and histograms.
    exported = {n for n in exported if not (
        n.endswith("_created") and {n.removesuffix("_created") + "_total",
                                    n.removesuffix("_created")} & set(types))}
    documented = documented_metrics()
    assert exported - documented == set(), "exported but not in docs/metrics.md's table"
    assert documented - exported == set(), "in docs/metrics.md's table but not exported"

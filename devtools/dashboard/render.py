"""Draw the dashboard, manifests/grafana/dashboard.json, over a real, scripted run on
this machine alone (no real node): the quick way to see a change to the dashboard.

    .venv/bin/pip install -e '.[docs]'      # matplotlib; never a runtime dependency
    .venv/bin/python -m devtools.dashboard.render [--out dashboard.png] [--seconds 150]

docs/dashboard.png itself is drawn by tests/cluster/test_in_cluster.py's rollout test,
with this module's `draw`, from the Deployment in manifests/ on the real node scraped by
Prometheus through service discovery (`IN_CLUSTER_DASHBOARD=docs/dashboard.png`; the
command is in docs/metrics.md). Both evaluate the panels with
devtools.dashboard.prometheus.

Nothing in the picture is made up. The script:Nothing in the picture is made up. The script:

1. starts a throwaway local etcd + kube-apiserver (devtools.cluster.localcluster);
2. runs two controller replicas as separate processes, exactly as the Deployment
   does (`python -m controller --leader-elect ...`, 2 workers, short leases so a
   hand-over shows within the run), watching namespace "demo";
3. runs a real Prometheus (built once from the Go module proxy, see
   tests/promtools.py) scraping both replicas' /metrics every second;
4. plays a scripted workload against the API server, moving TaskRuns with the
   labelled Tekton stand-in beside this module (devtools.dashboard.simulator):
   - steady arrivals: a BuildRun every ~1.2 s; most succeed, some fail, a few
     name a Build that does not exist (user errors), a few are cancelled;
   - a webhook outage: the FlakyWebhook times out every TaskRun creation for
     ~35 s, so reconciles fail with error class "webhook", keys back off, the
     queue grows, and BuildRuns whose retry budget (--max-retries 6) runs out
     end with ReconcilerRetriesExhausted;
   - the leader is stopped with SIGTERM (it releases the Lease, the standby
     takes over) and started again as the new standby;
   - a burst of 25 BuildRuns at once;
5. evaluates every query of every panel in dashboard.json with that Prometheus
   (query_range, 1 s steps; Grafana's $__rate_interval is taken as 10s and
   $__range as the whole run) and draws the panels on the dashboard's own grid
   (`draw`, which takes those query results and nothing else).
   The shaded bands mark the scripted phases; they are not part of the dashboard.

A run takes about four minutes (more the first time, while Prometheus builds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from controller.runtime.kube import JSON, Kube, load_api_client
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster, free_port
from devtools.dashboard.prometheus import (
    Prometheus,
    Results,
    evaluate,
    static_scrape,
)
from devtools.dashboard.simulator import TaskRunDriver
from devtools.fakes.tekton import Finish
from devtools.fakes.webhook import FlakyWebhook, Verdict
from devtools.hack import REPO
from tests.promtools import prometheus_binary

NS = "demo"
DASHBOARD = REPO / "manifests" / "grafana" / "dashboard.json"


def say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


# -- the controller replicas ---------------------------------------------------------


@dataclass
class Replica:
    name: str
    kubeconfig: Path
    workdir: Path
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def flags(self) -> list[str]:
        """The controller's flags for this replica (after `python -m controller`)."""
        return [f"--kubeconfig={self.kubeconfig}",
                f"--namespace={NS}", "--leader-elect",
                "--leader-election-namespace=buildrun-controller",
                "--lease-duration=4", "--renew-deadline=3", "--retry-period=1",
                "--max-concurrent-reconciles=2", "--max-retries=6", "--max-retry-duration=0",
                "--backoff-base-delay=0.2", "--backoff-max-delay=10",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                "--health-probe-bind-address=127.0.0.1:0", "--log-format=json"]

    def start(self) -> None:
        log = (self.workdir / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller", *self.flags()],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    async def is_leader(self) -> bool:
        try:
            async with aiohttp.ClientSession() as s, s.get(
                    f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
                text = await r.text()
        except aiohttp.ClientError:
            return False
        return 'leader_election_master_status{name="buildrun-controller"} 1.0' in text


# -- the workload ----------------------------------------------------------------------


@dataclass
class Phases:
    """Seconds since the start of the workload."""
    outage: tuple[float, float] = (40.0, 75.0)
    handover: float = 95.0
    burst: float = 110.0
    end: float = 150.0
    marks: dict[str, tuple[float, float]] = field(default_factory=dict)


def plan(taskrun: JSON) -> tuple[float, Finish]:
    rng = random.Random(taskrun["metadata"]["name"])
    roll = rng.random()
    how: Finish = "success" if roll < 0.82 else "failure" if roll < 0.94 else "oom"
    return rng.uniform(2.0, 8.0), how


async def setup(kube: Kube) -> None:
    await fixtures.setup_namespace(kube, NS)
    await fixtures.create_namespace(kube, "buildrun-controller")


async def workload(kube: Kube, phases: Phases, t0: float, replicas: list[Replica]) -> None:
    rng = random.Random(7)
    counter = 0
    background: set[asyncio.Task[None]] = set()

    async def create(cancel_after: float | None = None) -> None:
        nonlocal counter
        counter += 1
        name = f"br-{counter:04d}"
        build = "does-not-exist" if rng.random() < 0.07 else fixtures.BUILD
        await kube.create(BUILDRUNS, NS, fixtures.buildrun(name, build))
        if cancel_after is not None:
            async def cancel() -> None:
                await asyncio.sleep(cancel_after)
                with contextlib.suppress(Exception):
                    await kube.patch(BUILDRUNS, NS, name, {"spec": {"state": "BuildRunCanceled"}})
            task = asyncio.create_task(cancel())
            background.add(task)
            task.add_done_callback(background.discard)

    def now() -> float:
        return time.monotonic() - t0

    handed_over = burst_done = False
    while now() < phases.end:
        await create(cancel_after=3.0 if rng.random() < 0.06 else None)
        if not handed_over and now() >= phases.handover:
            handed_over = True
            leader = None
            for replica in replicas:
                if await replica.is_leader():
                    leader = replica
            if leader is not None:
                say(f"[render] stopping the leader {leader.name} (SIGTERM); the standby takes over")
                start = now()
                await asyncio.to_thread(leader.stop)
                leader.start()
                phases.marks["leader stopped"] = (start, now() + 1)
        if not burst_done and now() >= phases.burst:
            burst_done = True
            say("[render] a burst of 25 BuildRuns")
            phases.marks["burst of 25"] = (now(), now() + 2)
            for _ in range(25):
                await create()
        await asyncio.sleep(rng.uniform(0.6, 1.8))
    await asyncio.gather(*background, return_exceptions=True)


# -- drawing -----------------------------------------------------------------------------

BG, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9",
           "#705da0", "#37872d", "#fade2a"]
COLORS = {"success": "#73bf69", "error": "#f2495c", "requeue_after": "#8ab8ff",
          "Succeeded": "#73bf69", "Failed": "#f2495c", "BuildNotFound": "#ff780a",
          "BuildRunCanceled": "#b877d9", "ReconcilerRetriesExhausted": "#c4162a",
          "StepOutOfMemory": "#fade2a", "webhook": "#ff780a", "exhausted": "#c4162a"}


def legend(fmt: str, labels: dict[str, str]) -> str:
    out = fmt
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value)
    return out


def draw(dashboard: dict[str, Any], series: Results, stats: Results, t0: float, t1: float,
         marks: dict[str, tuple[float, float]], out: Path, subtitle: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_w, unit_h = 0.95, 0.36  # inches per grid column / row
    header = 0.9
    fig_w, fig_h = 24 * unit_w, rows * unit_h + header
    fig = plt.figure(figsize=(fig_w, fig_h), dpi=96, facecolor=BG)
    fig.text(0.008, 1 - 0.35 / fig_h, dashboard["title"], color=TEXT, fontsize=17,
             weight="bold", va="center")
    fig.text(0.008, 1 - 0.72 / fig_h, subtitle, color="#8e8e8e", fontsize=10.5, va="center")
    pad = 0.08

    def rect(g: dict[str, int]) -> tuple[float, float, float, float]:
        left = (g["x"] * unit_w + pad) / fig_w
        width = (g["w"] * unit_w - 2 * pad) / fig_w
        top = fig_h - header - g["y"] * unit_h
        height = g["h"] * unit_h - 2 * pad
        return left, (top - pad - height) / fig_h, width, height / fig_h

    def fmt_time(x: float, _: object) -> str:
        return f"{int(x // 60)}:{int(x % 60):02d}"

    for p in panels:
        left, bottom, width, height = rect(p["gridPos"])
        frame = fig.add_axes((left, bottom, width, height))
        frame.set_facecolor(PANEL)
        frame.set_xticks([])
        frame.set_yticks([])
        for spine in frame.spines.values():
            spine.set_color(GRID)
        frame.text(0.012, 1 - 0.22 / (height * fig_h), p["title"], transform=frame.transAxes,
                   color=TEXT, fontsize=11.5, weight="bold", va="center")
        defaults = p["fieldConfig"]["defaults"]
        if p["type"] == "stat":
            result = stats[(p["id"], p["targets"][0]["refId"])]
            value = float(result[0]["value"][1]) if result else None
            text, color = _stat_display(value, defaults)
            frame.set_facecolor(color)
            frame.text(0.5, 0.42, text, transform=frame.transAxes, color="white",
                       fontsize=26, weight="bold", ha="center", va="center")
            continue
        inner_h = height - (0.42 + 0.62) / fig_h
        ax = fig.add_axes((left + 0.42 / fig_w, bottom + 0.62 / fig_h,
                           width - 0.55 / fig_w, inner_h))
        ax.set_facecolor(PANEL)
        ax.tick_params(colors="#9fa7b3", labelsize=8.5)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.grid(True, color=GRID, linewidth=0.6)
        ax.xaxis.set_major_formatter(FuncFormatter(fmt_time))
        ax.set_xlim(0, t1 - t0)
        for i, (name, (a, b)) in enumerate(marks.items()):
            ax.axvspan(a, b, color="#ffffff", alpha=0.06, linewidth=0)
            # One line lower for each: marks that begin together stay legible.
            ax.text(a, 1.0 - 0.09 * i, f" {name}", transform=ax.get_xaxis_transform(),
                    color="#9fa7b3", fontsize=7.5, va="top")
        bars = defaults.get("custom", {}).get("drawStyle") == "bars"
        if defaults.get("custom", {}).get("scaleDistribution", {}).get("type") == "log":
            ax.set_yscale("log")
        stacked = defaults.get("custom", {}).get("stacking", {}).get("mode") == "normal"
        base: dict[float, float] = {}
        handles = 0
        for target in p["targets"]:
            for i, s in enumerate(series[(p["id"], target["refId"])]):
                xs = [float(t) - t0 for t, _ in s["values"]]
                ys = [float(v) for _, v in s["values"]]
                label = legend(target["legendFormat"], s["metric"])
                color = COLORS.get(label) or PALETTE[(handles + i) % len(PALETTE)]
                if bars:
                    bottoms = [base.get(x, 0.0) for x in xs] if stacked else None
                    ax.bar(xs, ys, width=1.0, bottom=bottoms, color=color, alpha=0.85,
                           label=label, linewidth=0)
                    if stacked:
                        for x, y in zip(xs, ys, strict=True):
                            base[x] = base.get(x, 0.0) + y
                else:
                    drawstyle = "steps-post" if defaults.get("custom", {}).get(
                        "lineInterpolation") == "stepAfter" else "default"
                    ax.plot(xs, ys, color=color, linewidth=1.3, label=label,
                            drawstyle=drawstyle)
                handles += 1
        ax.yaxis.set_major_formatter(FuncFormatter(_unit_formatter(defaults.get("unit", ""))))
        if handles:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=min(handles, 6),
                      frameon=False, fontsize=8.5, labelcolor=TEXT, handlelength=1.2,
                      columnspacing=1.2)
        else:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, color="#9fa7b3",
                    ha="center", va="center")
    fig.savefig(out, facecolor=BG)


def _stat_display(value: float | None, defaults: dict[str, Any]) -> tuple[str, str]:
    if value is None:
        return "No data", "#3d71d9"
    for mapping in defaults.get("mappings") or []:
        hit = mapping.get("options", {}).get(str(int(value)))
        if hit:
            return hit["text"], {"green": "#37872d", "red": "#c4162a"}.get(hit["color"],
                                                                             hit["color"])
    steps = (defaults.get("thresholds") or {}).get("steps") or [{"color": "blue", "value": None}]
    color = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            color = step["color"]
    named = {"green": "#37872d", "red": "#c4162a", "orange": "#fa6400", "blue": "#1f60c4"}
    return f"{value:.0f}", named.get(color, color)


def _unit_formatter(unit: str) -> Any:
    def fmt(y: float, _: object) -> str:
        if unit == "s":
            if y == 0:
                return "0"
            if y < 1e-3:
                return f"{y * 1e6:.0f}µs"
            if y < 1:
                return f"{y * 1e3:.0f}ms"
            return f"{y:.0f}s"
        if unit == "ops":
            return f"{y:g}/s"
        return f"{y:g}"
    return fmt


# -- main -----------------------------------------------------------------------------


async def run(out: Path, seconds: float) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    phases = Phases(end=seconds)
    workdir = Path(tempfile.mkdtemp(prefix="render-dashboard-"))
    say(f"[render] working folder {workdir}")
    prometheus_binary("prometheus")  # build it first if needed, outside the timed run
    async with LocalCluster(workdir / "cluster") as cluster:
        kube = Kube(await load_api_client(str(cluster.kubeconfig)))
        await setup(kube)
        replicas = [Replica(n, cluster.kubeconfig, workdir) for n in ("replica-a", "replica-b")]
        prometheus = Prometheus(workdir, [static_scrape(
            "buildrun-controller-metrics", [f"127.0.0.1:{r.metrics_port}" for r in replicas],
            {"namespace": "buildrun-controller"})])
        await prometheus.start()
        t0 = time.monotonic()
        wall0 = time.time()
        outage = (t0 + phases.outage[0], t0 + phases.outage[1])

        def script(call: int) -> Verdict:
            return "timeout" if outage[0] <= time.monotonic() < outage[1] else "allow"

        tekton = TaskRunDriver(kube, NS, say, plan, start_after=0.5)
        try:
            for r in replicas:
                r.start()
            await asyncio.sleep(3)
            async with FlakyWebhook(cluster, NS, script):
                sim = asyncio.create_task(tekton.run())
                phases.marks["webhook outage"] = phases.outage
                try:
                    await workload(kube, phases, t0, replicas)
                    say("[render] workload done; letting the last BuildRuns finish")
                    await asyncio.sleep(12)
                finally:
                    sim.cancel()
                    await asyncio.gather(sim, return_exceptions=True)
            wall1 = time.time()
            series, stats = await evaluate(dashboard, prometheus, wall0, wall1)
        finally:
            for r in replicas:
                r.stop()
            prometheus.stop()
            await kube.close()
    day = datetime.date.today().isoformat()
    subtitle = (f"Rendered by devtools/dashboard/render.py on {day} from a real "
                f"{int(wall1 - wall0)}s scripted run: two replicas, Prometheus scraping every "
                "1s, $__rate_interval=10s. Shaded: the scripted events.")
    draw(dashboard, series, stats, wall0, wall1, phases.marks, out, subtitle)
    say(f"[render] wrote {out} (logs in {workdir})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--out", type=Path, default=Path("dashboard.png"))
    p.add_argument("--seconds", type=float, default=150.0,
                   help="length of the scripted workload (default 150)")
    args = p.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(run(args.out, args.seconds))


if __name__ == "__main__":
    main()

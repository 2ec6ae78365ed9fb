"""`history NAMESPACE/NAME` (controller/commands/history.py) against the real API server."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller import cli
from controller.commands.history import event_time, history, parser
from controller.runtime.kube import EVENTS, Kube
from devtools.cluster.localcluster import LocalCluster
from tests.harness import World, controller_settings, running_controller, wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


async def _show(cluster: LocalCluster, target: str, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    args = parser().parse_args([target, "--kubeconfig", str(cluster.kubeconfig), *extra])
    return await history(args, out), out.getvalue()


async def test_history_shows_status_and_events_in_time_order(
    cluster: LocalCluster, kube: Kube, world: World
) -> None:
    ns = world.ns
    async with running_controller(controller_settings(cluster, ns)):
        await world.buildrun("br")
        taskrun = await world.taskrun_of("br")
        await world.finished("br", 30)

        # Tekton's controller records its own Events on the TaskRun.
        async def tekton_said_succeeded() -> bool:
            items = (await kube.list(EVENTS, ns))["items"]
            return any(e["involvedObject"]["name"] == taskrun and e["reason"] == "Succeeded"
                       for e in items)
        await wait_for(tekton_said_succeeded, 30, what="Tekton's Succeeded Event")

    code, text = await _show(cluster, f"{ns}/br")
    assert code == 0, text
    lines = text.splitlines()
    assert lines[0] == f"BuildRun {ns}/br"
    fields = dict(line.strip().split(":", 1) for line in lines[1:lines.index("")])
    assert fields["Succeeded"].strip() == "True (Succeeded)"
    assert fields["TaskRun"].strip() == taskrun
    assert fields["Completed"].strip().endswith("after creation)")

    start = next(i for i, line in enumerate(lines) if line.startswith("Events, oldest first"))
    header, *events = lines[start + 1:]
    assert header.split()[:5] == ["TIME", "SINCE", "CREATED", "TYPE", "OBJECT"]
    seen = [(line.split()[3], line.split()[4]) for line in events]
    ours = [reason for obj, reason in seen if obj == "BuildRun/br"]
    tekton = [reason for obj, reason in seen if obj == f"TaskRun/{taskrun}"]
    assert ours == ["Running", "Succeeded"], text
    assert "Succeeded" in tekton, text

    code, raw = await _show(cluster, f"{ns}/br", "-o", "json")
    data = json.loads(raw)
    assert data["buildrun"]["metadata"]["name"] == "br"
    times = [event_time(e) for e in data["events"]]
    assert all(t is not None for t in times), data["events"]
    assert times == sorted(times), text  # type: ignore[type-var]
    assert {e["involvedObject"]["kind"] for e in data["events"]} == {"BuildRun", "TaskRun"}


async def test_history_of_a_missing_buildrun_says_so(cluster: LocalCluster, world: World) -> None:
    code, text = await _show(cluster, f"{world.ns}/nope")
    assert code == 1 and text == ""


# The three ways to run the command: the controller's CLI (module and installed
# script) and history.py on its own parser.
ENTRY_POINTS = {
    "python -m controller": [sys.executable, "-m", "controller", "history"],
    "buildrun-controller": [str(Path(sys.executable).with_name("buildrun-controller")),
                            "history"],
    "python -m controller.commands.history": [sys.executable, "-m",
                                              "controller.commands.history"],
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_history_runs_from_every_entry_point_and_reports_bad_settings(
    entry: str, tmp_path: Path
) -> None:
    command = ENTRY_POINTS[entry]
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} is not installed")
    result = subprocess.run([*command, "demo/x", "--kubeconfig", str(tmp_path / "missing")],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"buildrun-controller history: kubeconfig "
                                     f"{tmp_path / 'missing'} does not exist")
    bad = subprocess.run([*command, "no-slash"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "expected NAMESPACE/NAME" in bad.stderr
    usage = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2
    assert usage.stderr.splitlines()[-1] == ("buildrun-controller history: error: the "
                                             "following arguments are required: NAMESPACE/NAME")


def test_the_history_subcommand_parses_as_history_does() -> None:
    """`history` is an argparse subcommand of the controller's CLI; without it the
    controller's flags parse as they always did."""
    args = ["demo/x", "--context", "kind", "-o", "json"]
    sub = vars(cli.parser().parse_args(["history", *args]))
    assert sub.pop("command") == "history"
    assert vars(parser().parse_args(args)).items() <= sub.items()
    # Connection flags given before the command are not reset by the command's defaults.
    before = cli.parser().parse_args(["--kubeconfig", "/k", "--context", "c", "history",
                                      "demo/x"])
    assert (before.kubeconfig, before.context, before.output) == ("/k", "c", "text")
    run = cli.parser().parse_args(["--max-retries", "3"])
    assert run.command is None
    assert cli.settings_from(run).budget.max_retries == 3

"""--failure-log-snippet on the session's stack: a real failing build's last lines in its
Warning Event, read once; and, where the log cannot be read (kwok's pods have no
kubelet to read it from; the controller's ServiceAccount without the opt-in pods/log
grant), the same outcome with an Event that says why there are no lines.

Each test reads the Events as `kubectl describe` does (a list of the namespace's Events,
by involved object).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from controller.buildrun import reasons
from controller.buildrun.snippets import READ, UNREADABLE
from controller.runtime.events import MESSAGE_MAX
from controller.runtime.kube import EVENTS, JSON, Kube
from controller.settings import LogSnippetSettings
from devtools.cluster.stack import TektonStack
from devtools.node.realnode import RealNode
from tests.cluster import test_real_builds as real
from tests.cluster.test_manifests import _service_account_kubeconfig as service_account_kubeconfig
from tests.harness import (
    World,
    condition,
    controller_settings,
    metric,
    running_controller,
    wait_for,
)

pytestmark = pytest.mark.cluster

# The real-build module's fixtures: Shipwright's step images in the environment, and a
# namespace without kwok fates.
node_env = real.node_env
world_real = real.world_real

LINES = 30
# Thirty numbered lines, the 25th in red as a build tool colours an error, then exit 3.
SCRIPT = (f"i=1; while [ $i -le {LINES} ]; do "
          "if [ $i -eq 25 ]; then printf '\\033[31mline %s of 30\\033[0m\\n' $i; "
          f"else echo \"line $i of {LINES}\"; fi; i=$((i+1)); done; exit 3")


async def failure_events(kube: Kube, namespace: str, buildrun: str) -> list[JSON]:
    items = (await kube.list(EVENTS, namespace))["items"]
    return [e for e in items if e["involvedObject"]["name"] == buildrun
            and e["type"] == "Warning"]


async def one_failure_event(kube: Kube, namespace: str, buildrun: str) -> JSON:
    """The BuildRun's Warning Event, once posted; then, after the controller has had the
    time to send a second (it looks at the finished BuildRun again), still the only one."""
    await wait_for(lambda: failure_events(kube, namespace, buildrun), 30, 0.2,
                   what=f"a Warning Event for {buildrun}")
    await asyncio.sleep(2.0)
    (event,) = await failure_events(kube, namespace, buildrun)
    return event


@pytest.mark.real_node
async def test_a_real_failed_steps_last_lines_are_in_its_warning_event(
    stack: TektonStack, real_node: RealNode, world_real: World, node_env: None,
) -> None:
    w = world_real
    await real.shell_build(w, real_node, "snippet", SCRIPT)
    settings = controller_settings(stack.cluster, w.ns, log_snippet=LogSnippetSettings())
    read_before = metric("buildrun_failure_log_snippets_total", result=READ)
    async with running_controller(settings):
        await w.buildrun("snippet-1", "snippet")
        done = await w.finished("snippet-1", real.BUILD_SECONDS)
        event = await one_failure_event(w.kube, w.ns, "snippet-1")
        assert metric("buildrun_failure_log_snippets_total", result=READ) - read_before == 1
    cond = condition(done)
    # The outcome is what it is without the flag (test_real_builds: exits 1).
    assert (cond["status"], cond["reason"]) == ("False", reasons.FAILED), cond
    assert done["status"]["failureDetails"]["location"]["container"] == "step-build"
    assert event["reason"] == reasons.FAILED
    message = event["message"]
    assert len(message.encode()) <= MESSAGE_MAX
    # The status's message, then the last 20 of the 30 lines the step printed, the colour
    # of the 25th gone; the log command in the status message prints the same lines.
    printed = [f"line {i} of {LINES}" for i in range(1, LINES + 1)]
    assert message.split("\n") == [
        cond["message"], "Last 20 lines of step-build's log:", *printed[-20:]], message
    namespace, pod, container = real.logs_hint(cond["message"])
    log = await real.pod_log(stack.cluster, namespace, pod, container)
    assert "\x1b[31mline 25 of 30" in log  # what the step printed, before cleaning


async def test_an_unreadable_log_leaves_the_outcome_and_says_why_in_the_event(
    stack: TektonStack, world: World,
) -> None:
    """kwok's node has no kubelet to serve pods/log: the read fails, the BuildRun fails as
    it would without the flag, and its one Warning Event says why there are no lines."""
    world.fate("kwok-fails", fate="fail", exit_code="3")
    settings = controller_settings(stack.cluster, world.ns, log_snippet=LogSnippetSettings())
    unreadable_before = metric("buildrun_failure_log_snippets_total", result=UNREADABLE)
    async with running_controller(settings):
        await world.buildrun("kwok-fails")
        done = await world.finished("kwok-fails", 30)
        event = await one_failure_event(world.kube, world.ns, "kwok-fails")
        assert metric("buildrun_failure_log_snippets_total",
                      result=UNREADABLE) - unreadable_before == 1
    cond = condition(done)
    assert (cond["status"], cond["reason"]) == ("False", reasons.FAILED), cond
    container = done["status"]["failureDetails"]["location"]["container"]
    head, note = event["message"].split("\n")
    assert head == cond["message"]
    assert note.startswith(f"The log of {container} could not be read: "), note


async def test_without_the_pods_log_grant_the_event_names_what_is_missing(
    stack: TektonStack, world: World, tmp_path: Path,
) -> None:
    """The controller as its ServiceAccount with the install's RBAC and not the opt-in
    manifests/rbac/pod_logs.yaml: the API server refuses the read (403, before it would
    ask any kubelet), the BuildRun fails as it would without the flag, and the Event says
    which grant is missing."""
    kubeconfig = await service_account_kubeconfig(stack.cluster, tmp_path / "sa.kubeconfig")
    world.fate("denied", fate="fail", exit_code="3")
    settings = replace(controller_settings(stack.cluster, world.ns,
                                           log_snippet=LogSnippetSettings()),
                       kubeconfig=str(kubeconfig))
    async with running_controller(settings):
        await world.buildrun("denied")
        done = await world.finished("denied", 30)
        event = await one_failure_event(world.kube, world.ns, "denied")
    cond = condition(done)
    assert (cond["status"], cond["reason"]) == ("False", reasons.FAILED), cond
    head, note = event["message"].split("\n")
    assert head == cond["message"]
    container = done["status"]["failureDetails"]["location"]["container"]
    assert note.startswith(
        f"The log of {container} could not be read: the controller needs get on pods/log "
        "(manifests/rbac/pod_logs.yaml); 403 Forbidden"), note

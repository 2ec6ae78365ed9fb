"""The real node itself (devtools.node.realnode): a second stack's node runs beside the
session's on the same machine, and stopping it leaves nothing behind: no process, no
cgroup, nothing in the host's /var/lib, /var/log or /run, no kernel tunable changed, no
network interface on the host (the node's network is a namespace of its own), and
the session's node and its running pod untouched; and containerd and the kubelet restart
under a running pod as a node's would (RealNode.restart)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from controller.runtime.kube import JSON, PODS, Kube
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.processes import command_lines
from devtools.cluster.stack import TektonStack
from devtools.node.nodens import KUBELET_TUNABLES, hierarchies
from devtools.node.realnode import CONTAINERD, KUBELET, NODE, RealNode, place_pod
from tests.cluster.test_real_builds import pod_log
from tests.harness import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

# What the kubelet and containerd write outside their folders when nothing contains them.
HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd",
              "/usr/libexec/kubernetes", "/var/lib/containerd", "/opt/containerd")


def pod(name: str, image: str, script: str) -> JSON:
    """A pod put on the real node by place_pod's patch, as a mutating webhook would."""
    body: JSON = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                  "spec": {"restartPolicy": "Never",
                           "containers": [{"name": "c", "image": image,
                                           "command": ["sh", "-c", script]}]}}
    for op in place_pod(body):
        assert op["op"] == "add" and op["path"].startswith("/spec/"), op
        body["spec"][op["path"].removeprefix("/spec/")] = op["value"]
    return body


async def phase(cluster: LocalCluster, namespace: str, name: str, want: str) -> JSON:
    async def reached() -> JSON | None:
        got: JSON = await cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return got if (got.get("status") or {}).get("phase") == want else None
    result: JSON = await wait_for(reached, 120, 0.2, what=f"pod {name} to be {want}")
    return result


def host_paths() -> set[str]:
    return {p for p in HOST_PATHS if Path(p).exists()}


def host_links() -> set[str]:
    """The host's network interfaces (the node's bridge and pods' veths are in its own
    network namespace, never here)."""
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip() for line in out.stdout.splitlines()}


def tunables() -> dict[str, str]:
    return {p: (Path("/proc/sys") / p).read_text() for p in KUBELET_TUNABLES}


async def test_a_second_stacks_node_runs_beside_and_leaves_nothing_behind(
    stack: TektonStack, real_node: RealNode, kube: Kube, namespace: str,
    tmp_path: Path,
) -> None:
    existed = host_paths()
    before = tunables()
    links = host_links()
    # A pod running on the session's node all along.
    await kube.create(PODS, namespace, pod("steady", real_node.registry.base_image(),
                                           "echo steady; sleep 600"))
    await phase(stack.cluster, namespace, "steady", "Running")

    second = TektonStack(tmp_path / "second", real_node=True)
    async with second:
        t = time.monotonic()
        node = await second.real_node()
        started = time.monotonic() - t
        assert node.cgroup_root != real_node.cgroup_root
        await second.cluster.request("POST", "/api/v1/namespaces/default/pods",
                                     pod("other", node.registry.base_image(),
                                         "echo from the second"))
        ran = await phase(second.cluster, "default", "other", "Succeeded")
        assert ran["spec"]["nodeName"] == NODE
        assert "from the second" in await pod_log(second.cluster, "default", "other", "c")
        assert tunables() == before, "the kubelet changed the host's kernel tunables"
        cgroup_root = node.cgroup_root
        net_folder = node.net_folder
        assert net_folder is not None and net_folder.exists()
        # The second node's network is its own namespace's: the host gained no interface.
        assert host_links() == links
        t = time.monotonic()
    stopped = time.monotonic() - t

    # Every process of the second stack names its folder, or the node's network folder
    # (its gateway and the forwarder in its namespace).
    folders = (str(tmp_path / "second").encode(), str(net_folder).encode())
    left = [b" ".join(argv).decode(errors="replace") for _, argv in command_lines()
            if any(folder in b" ".join(argv) for folder in folders)]
    assert left == [], left
    assert [h / cgroup_root for h in hierarchies() if (h / cgroup_root).exists()] == []
    assert host_paths() == existed
    assert tunables() == before
    assert not net_folder.exists()
    assert host_links() == links
    # The session's node never noticed.
    steady = await phase(stack.cluster, namespace, "steady", "Running")
    assert steady["status"]["containerStatuses"][0]["restartCount"] == 0
    assert "steady" in await pod_log(stack.cluster, namespace, "steady", "c")
    print(f"\nsecond real node: up in {started:.1f}s, its stack stopped in {stopped:.1f}s")


async def test_containerd_and_the_kubelet_restart_under_a_running_pod(
    stack: TektonStack, real_node: RealNode, kube: Kube, namespace: str,
) -> None:
    """RealNode.restart, as a node's service manager restarts them: containerd killed
    (a crash) and the kubelet stopped, each started again, and the pod that ran all along
    runs on (its shim kept, never restarted), its log still served; a new pod runs."""
    await kube.create(PODS, namespace, pod("through", real_node.registry.base_image(),
                                           "echo before; sleep 5; echo after; sleep 600"))
    await phase(stack.cluster, namespace, "through", "Running")
    crash = await real_node.restart(CONTAINERD, signal.SIGKILL)
    assert (crash.signal, crash.exit_code) == ("SIGKILL", -signal.SIGKILL)
    assert crash.new_pid != crash.old_pid
    assert crash.shims_before >= 1, crash
    assert crash.shims_kept == crash.shims_after == crash.shims_before, crash
    stop = await real_node.restart(KUBELET)
    assert stop.signal == "SIGTERM" and stop.new_pid != stop.old_pid
    assert stop.shims_kept == stop.shims_after == stop.shims_before, stop
    running = await phase(stack.cluster, namespace, "through", "Running")
    assert running["status"]["containerStatuses"][0]["restartCount"] == 0

    async def said_after() -> bool:
        try:
            return "after" in await pod_log(stack.cluster, namespace, "through", "c")
        except AssertionError:  # 404 until the new kubelet has the pod again
            return False
    await wait_for(said_after, 60, 0.5, what="the pod's log after the restarts")
    await kube.create(PODS, namespace, pod("after", real_node.registry.base_image(), "echo fresh"))
    await phase(stack.cluster, namespace, "after", "Succeeded")
    print(f"\nrestarts: containerd {crash.ready_at - crash.signalled_at:.2f}s "
          f"(shims {crash.shims_before} -> {crash.shims_after}), kubelet "
          f"{stop.ready_at - stop.signalled_at:.2f}s to start")

"""devtools.node.realnode and its images without a node: what it writes for containerd
and the kubelet, what it says a machine lacks, and that a Build's placement matches the
node it makes."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools import hack
from devtools.cluster import stack
from devtools.cluster.pipelines import fake_images
from devtools.node import images, realnode
from devtools.node.images import NodeImages
from devtools.node.realnode import LABEL, REAL, RealNode, placement

IMAGES = NodeImages(
    folder=Path("/nowhere"), pause="buildrun.test/pause:3.10.1",
    shell="buildrun.test/library/busybox:1.35.0",
    tekton={c: f"buildrun.test/tekton/{c}:v1" for c in
            ("entrypoint", "nop", "workingdirinit", "sidecarlogresults")},
    shipwright={c: f"buildrun.test/shipwright/{c}:v0.20.13" for c in
                ("git", "bundle", "waiter", "image-processing")},
    buildah=("quay.io/containers/buildah:v1.43.1",), mirrors=("buildrun.test", "quay.io"))


class _Cluster:
    kubeconfig = Path("/nowhere/kubeconfig")


def node(tmp_path: Path) -> RealNode:
    prepared = realnode.Prepared(Path("/nowhere/kubelet"), IMAGES, Path("/nowhere/kube-proxy"))
    return RealNode(tmp_path, _Cluster(), prepared, tmp_path / "ca.crt")  # type: ignore[arg-type]


def test_containerd_config_is_toml_with_the_registry_as_every_mirror(tmp_path: Path) -> None:
    n = node(tmp_path)
    config = tomllib.loads(n._containerd_config(Path("/run/containerd/containerd.sock"))
                           .read_text())
    cri: dict[str, Any] = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert config["version"] == 2
    assert config["root"] == str(tmp_path / "containerd" / "root")
    assert config["grpc"]["address"] == "/run/containerd/containerd.sock"
    assert cri["sandbox_image"] == IMAGES.pause
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": False}
    assert cri["registry"]["mirrors"] == {
        host: {"endpoint": [f"http://{n.registry.address}"]}
        for host in ("buildrun.test", "quay.io", "docker.io", n.registry.address)}
    assert cri["cni"]["bin_dir"] == str(realnode.CNI_BIN)
    network = json.loads((tmp_path / "cni" / realnode.CNI_CONFIG).read_text())
    bridge = network["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["isGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": realnode.POD_CIDR}]]


def test_the_kubelet_registers_the_taint_and_label_placement_names(tmp_path: Path) -> None:
    n = node(tmp_path)
    config = yaml.safe_load(n._kubelet_config(Path("/run/containerd/containerd.sock"))
                            .read_text())
    taint = config["registerWithTaints"][0]
    (toleration,) = placement()["tolerations"]
    assert (toleration["key"], toleration["value"], toleration["effect"]) == (
        taint["key"], taint["value"], taint["effect"])
    assert placement()["nodeSelector"] == {LABEL: REAL}
    assert config["address"] == "127.0.0.1" and config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["cgroupRoot"] == f"/{n.cgroup_root}"
    assert config["makeIPTablesUtilChains"] is False


def test_place_pod_adds_the_placement_and_keeps_what_the_pod_had() -> None:
    pod = {"spec": {"nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                    "containers": [{"name": "c", "image": "i"}]}}
    patched = {op["path"]: op["value"] for op in realnode.place_pod(pod)}
    assert patched == {
        "/spec/nodeSelector": {"disk": "ssd", LABEL: REAL},
        "/spec/tolerations": [{"key": "k", "operator": "Exists"},
                              *placement()["tolerations"]],
        "/spec/hostNetwork": True}
    assert {op["path"] for op in realnode.place_pod({"spec": {}})} == set(patched)


def test_serve_github_points_every_container_at_the_git_server(tmp_path: Path) -> None:
    n = node(tmp_path)
    pod = {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]},
                                   {"name": "b"}]}}
    ops = n.serve_github(pod)
    wanted = [{"name": "GIT_CONFIG_COUNT", "value": "1"},
              {"name": "GIT_CONFIG_KEY_0",
               "value": f"url.http://127.0.0.1:{n.git_port}/.insteadOf"},
              {"name": "GIT_CONFIG_VALUE_0", "value": "https://github.com/"}]
    assert ops == [*({"op": "add", "path": "/spec/containers/0/env/-", "value": v}
                     for v in wanted),
                   {"op": "add", "path": "/spec/containers/1/env", "value": wanted}]
    assert n.serve_github({"spec": {}}) == []


def test_a_stand_in_is_the_registrys_image_under_another_name(tmp_path: Path) -> None:
    repositories = tmp_path / "docker/registry/v2/repositories"
    busybox = repositories / "library/busybox"
    for link in ("_layers/sha256/aa/link", "_manifests/revisions/sha256/bb/link",
                 "_manifests/tags/1.35.0/current/link", "_manifests/tags/old/current/link"):
        (busybox / link).parent.mkdir(parents=True, exist_ok=True)
        (busybox / link).write_text("sha256:bb" if "tags" in link else link)
    assert IMAGES.stand_ins() == {"docker.io/library/alpine:latest": IMAGES.shell}
    images._tag_as(tmp_path, IMAGES.shell, "docker.io/library/alpine:latest")
    alpine = repositories / "library/alpine"
    assert [p.name for p in (alpine / "_manifests/tags").iterdir()] == ["latest"]
    assert (alpine / "_manifests/tags/latest/current/link").read_text() == "sha256:bb"
    assert (alpine / "_layers/sha256/aa/link").exists()
    assert (busybox / "_manifests/tags/1.35.0/current/link").exists()


def test_two_nodes_never_share_a_cgroup_root_or_a_port(tmp_path: Path) -> None:
    a, b = node(tmp_path / "a"), node(tmp_path / "b")
    assert a.cgroup_root != b.cgroup_root
    assert {a.registry.port, a.git_port}.isdisjoint({b.registry.port, b.git_port})


def test_the_images_as_tekton_flags_and_shipwright_variables() -> None:
    assert IMAGES.tekton_flags()["-shell-image"] == IMAGES.shell
    assert IMAGES.tekton_flags()["-entrypoint-image"] == IMAGES.tekton["entrypoint"]
    assert IMAGES.shipwright_env() == {
        "GIT_CONTAINER_IMAGE": IMAGES.shipwright["git"],
        "BUNDLE_CONTAINER_IMAGE": IMAGES.shipwright["bundle"],
        "WAITER_CONTAINER_IMAGE": IMAGES.shipwright["waiter"],
        "IMAGE_PROCESSING_CONTAINER_IMAGE": IMAGES.shipwright["image-processing"]}
    assert IMAGES.in_registry("127.0.0.1:5000", IMAGES.shell) == (
        "127.0.0.1:5000/library/busybox:1.35.0")


@pytest.mark.parametrize(("lacks", "says"), [
    ("root", "the real node needs root"),
    ("overlay", "the real node needs overlayfs"),
])
def test_what_a_machine_lacks_is_one_line(monkeypatch: pytest.MonkeyPatch, lacks: str,
                                          says: str) -> None:
    if lacks == "root":
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
    else:
        real_read = Path.read_text

        def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
            if str(self) == "/proc/filesystems":
                return "nodev\tproc\nnodev\ttmpfs\n\text4\n"
            return real_read(self, *args, **kwargs)
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        monkeypatch.setattr(Path, "read_text", read_text)
    why = realnode.unavailable()
    assert why is not None and why.startswith(says) and "\n" not in why
    with pytest.raises(realnode.NodeUnavailable, match=f"^{says}"):
        realnode.prepare()


async def test_a_stack_where_no_real_node_can_run_says_why_and_runs_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cannot() -> realnode.Prepared:
        raise realnode.NodeUnavailable("the real node needs root (containerd, ...)")
    monkeypatch.setattr(realnode, "prepare", cannot)
    monkeypatch.setattr(hack, "build", lambda component, *args: tmp_path)
    monkeypatch.setattr(hack, "need", lambda component, path: path)
    (tmp_path / "version").write_text("v1.12.0\n")  # hack/tekton/build's record of its release
    s = stack.TektonStack(tmp_path / "work", real_node=True)
    assert s.real_node_unavailable == "the real node needs root (containerd, ...)"
    with pytest.raises(realnode.NodeUnavailable, match=r"^the real node needs root"):
        await s.real_node()
    # Tekton's images stay the names nothing pulls; the API server gets no kubelet cert.
    assert s.tekton.images == fake_images(s.tekton.version)
    assert not any("kubelet-client" in a for a in s.cluster._apiserver.argv)


def test_kube_proxy_routes_services_in_the_nodes_namespace_only(tmp_path: Path) -> None:
    """iptables mode for the pod network's range, masquerading every Service packet (no
    br_netfilter needed for a pod that calls a Service backed by its neighbour), and the
    host-wide conntrack settings left alone."""
    n = node(tmp_path)
    config = yaml.safe_load(n._kube_proxy_config().read_text())
    assert config["mode"] == "iptables" and config["clusterCIDR"] == realnode.POD_CIDR
    assert config["hostnameOverride"] == realnode.NODE
    assert config["iptables"]["masqueradeAll"] is True
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["clientConnection"]["kubeconfig"] == str(_Cluster.kubeconfig)


def test_the_kubelets_port_is_the_one_the_host_forwards(tmp_path: Path) -> None:
    n = node(tmp_path)
    config = yaml.safe_load(n._kubelet_config(Path("/run/containerd/containerd.sock"))
                            .read_text())
    assert config["port"] == n.kubelet_port


def test_a_machine_without_netfilter_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """iptables that cannot list the NAT table in a new network namespace (no nf_tables
    or ip_tables in the kernel): one line naming it, for the tests' skip."""
    real_run = subprocess.run

    def run(argv: list[str], **kwargs: Any) -> Any:
        if "iptables" in argv:
            return subprocess.CompletedProcess(
                argv, 3, "", "iptables v1.8.9 (nf_tables): Could not fetch rule set "
                "generation id: Invalid argument\n")
        return real_run(argv, **kwargs)
    monkeypatch.setattr(subprocess, "run", run)
    why = realnode._netfilter_unavailable()
    assert why is not None and "\n" not in why
    assert why.startswith("kube-proxy needs netfilter's NAT table (iptables: iptables v1.8.9")


def test_this_machines_netfilter_is_found() -> None:
    if os.geteuid() != 0:
        pytest.skip("unshare --net needs root")
    assert realnode._netfilter_unavailable() is None

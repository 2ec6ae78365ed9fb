"""A real node in the test stack: containerd and a real kubelet that run the pods sent to
them, beside kwok's node, with a registry and a Git server on loopback.

devtools.cluster.stack.TektonStack(real_node=True) prepares it (`prepare()`: the kubelet
from hack/kubelet/build, every image from hack/node-images/build, both cached by
content) and `await stack.real_node()` starts it the first time a caller asks:

  docker-registry   `node.registry` (devtools.node.images.Registry): Debian's, on
                    127.0.0.1:<port>, serving every image a pod here needs; builds push
                    to it, and what they pushed is read back from it
  git server        devtools.node.gitserver on 127.0.0.1:<port>, serving the bare
                    repositories `create_repository` makes; stands in for GitHub
  containerd        Debian's 1.6, its root, state and socket in the stack's folder, the
                    registry as mirror of buildrun.test, quay.io and docker.io (so a pod
                    names an image as Shipwright's samples do and containerd pulls it
                    from here; images.STAND_INS are served under the names a strategy
                    gives)
  kubelet           v1.34 (the API server's module), node "localhost", labelled and
                    tainted `buildrun-controller.test/node=real`

containerd and the kubelet run in a mount namespace of their own under a supervisor
(devtools.node.nodens) that keeps everything they write outside their folders in the
stack's folder, and kills every process they leave when the stack stops. In there they
keep their defaults where those are hard-coded or make socket paths too long for the
stack's folder: the kubelet's root is /var/lib/kubelet, pods' logs /var/log/pods,
containerd's socket /run/containerd/containerd.sock, all of them in the namespace's
overlays, i.e. <stack>/node/ns/{var-lib,var-log,run}-upper/. containerd's root and state
are <stack>/node/containerd/. stop() removes the big ones (unpacked images, pods'
volumes) and keeps the logs.

A pod runs here only when it asks to: `placement()` is the nodeSelector and toleration a
Build (or BuildRun) gives, as a user would, and the scheduler does the rest.

The node has a network namespace of its own (nodens runs under `unshare --net`), and
nothing of it is routed on the host's network; the machine's rule is that traffic goes
only to loopback or to addresses inside namespaces the stack makes:

  node address      NODE_IP on the namespace's loopback: the kubelet's InternalIP, and
                    where the `kubernetes` Service's endpoint is (publish_apiserver)
  pod network       Debian's CNI plugins: a bridge (cni0, the pods' gateway) and
                    host-local addresses from POD_CIDR, in the node's namespace only
  Services          kube-proxy (hack/kube-proxy/build, the kubelet's module), iptables
                    mode, in the node's namespace: a pod reaches a Service's ClusterIP
                    (localcluster.SERVICE_CIDR) and the API server at the `kubernetes`
                    Service, as in any cluster (in-cluster configuration unchanged)
  the host's ports  the API server's, the registry's and the Git server's 127.0.0.1 ports
                    are served inside on every address of the namespace, each connection
                    forwarded through a Unix socket to the host's 127.0.0.1 (the Gateway of
                    devtools.cluster.netns: no IP route out); the kubelet's port the other
                    way, for the API server's pods/log and exec; DNS as netns relays it

A pod on the host's network (`hostNetwork: true`, as Tekton's config-defaults
`default-pod-template` makes every TaskRun's pod here) is on the node's namespace, so a
build reaches the registry and the Git server at 127.0.0.1 as before; any other pod gets
an address from POD_CIDR. Everything goes with the namespace when the node stops.

`await node.restart("containerd" | "kubelet", signal)` restarts one of the two while the
pods run on, as a node's service manager would (devtools.node.nodens: the containers
are kept; a new containerd finds them, a new kubelet its pods); a soak's fault.

Where the machine cannot hold a real node, `unavailable()` says what is missing in one
line (and tests skip with it): no root, no overlayfs, no cgroup memory controller, no
network namespace of its own, or the Debian tools (iptables and the CNI plugins among
them) cannot be installed.

Measured on the shared 2-core machine, everything cached (`python -m
devtools.cluster.stack DIR --real-node`, BENCHMARKS.md): registry and Git server up in
0.7-2.9 s, Node Ready at 1.9-2.9 s (load 2-10), 5.4 s once at load 12; stop 0.6-0.9 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from controller.runtime.timestamps import parse_time
from devtools.cluster import netns
from devtools.cluster.localcluster import LocalCluster, free_port
from devtools.cluster.polling import wait_until
from devtools.cluster.processes import Children
from devtools.hack import HACK, REPO
from devtools.node import gitserver
from devtools.node.images import NodeImages, Registry
from devtools.node.nodens import RESTART, RESTARTED, Restart

NODE = "localhost"  # the kubelet's name: resolves to 127.0.0.1, so the API server calls it there
LABEL = "buildrun-controller.test/node"
REAL = "real"
# Where the kubelet and containerd write outside their folders (hard-coded paths), made
# overlays in the node's mount namespace by nodens: their writes land in the stack's folder.
OVERLAYS = ("/var/lib", "/var/log", "/run")
# The cgroup root of the node's pods, in every hierarchy, made and removed by nodens.
CGROUP_PREFIX = "buildrun-node-"
KUBELET_CLIENT = "kube-apiserver-kubelet-client"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
# The process that holds the node's mount and network namespaces (devtools.node.nodens).
SUPERVISOR = "the real node's supervisor"
# The node's children, in the order nodens starts them; CONTAINERD and KUBELET can be
# restart()ed.
NETWORK, CONTAINERD, KUBELET, KUBE_PROXY = "network", "containerd", "kubelet", "kube-proxy"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "docker-registry", "unshare",
         "mount", "ip", "iptables", "iptables-restore")
# The node's network namespace (module doc): its own address and its pods' range; a
# second stack's node has the same ones in a namespace of its own.
NODE_IP = "10.89.0.1"
POD_CIDR = "10.88.0.0/16"
CNI_BRIDGE = "cni0"
# The CNI plugins the pod network uses (Debian's containernetworking-plugins).
CNI_BIN = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")

JSON = dict[str, Any]
# Where a Git URL of GitHub's is fetched from the Git server instead (serve_github).
GITHUB = "https://github.com/"


class NodeUnavailable(RuntimeError):
    """This machine cannot hold a real node: one line saying what is missing."""


class NodeError(RuntimeError):
    """The real node was to run here and did not: one line naming what failed."""


def placement() -> JSON:
    """A Build's (or BuildRun's) nodeSelector and tolerations that put its pod on the real
    node: `build_spec.update(placement())`."""
    return {"nodeSelector": {LABEL: REAL},
            "tolerations": [{"key": LABEL, "operator": "Equal", "value": REAL,
                             "effect": "NoSchedule"}]}


def place_pod(pod: JSON) -> list[JSON]:
    """JSON patch operations (RFC 6902) that put `pod`, as it is created, on the real node:
    placement()'s nodeSelector and toleration, and the host's network (the node has no pod
    network). For a mutating admission webhook, where whoever makes the pod cannot ask
    for the node itself (a Build can: placement())."""
    spec = pod.get("spec") or {}
    wanted = placement()
    ops: list[JSON] = [
        {"op": "add", "path": "/spec/nodeSelector",
         "value": {**(spec.get("nodeSelector") or {}), **wanted["nodeSelector"]}},
        {"op": "add", "path": "/spec/tolerations",
         "value": [*(spec.get("tolerations") or []), *wanted["tolerations"]]},
        {"op": "add", "path": "/spec/hostNetwork", "value": True},
    ]
    return ops


def unavailable() -> str | None:
    """What this machine lacks for a real node, in one line; None when it has it all
    (the Debian tools aside: hack/node-images/build installs those)."""
    if os.geteuid() != 0:
        return "the real node needs root (containerd, the kubelet and their mounts do)"
    if "overlay" not in Path("/proc/filesystems").read_text().split():
        return "the real node needs overlayfs (not in /proc/filesystems)"
    if not Path("/proc/self/cgroup").exists() or not any(
            (Path("/sys/fs/cgroup") / sub).exists()
            for sub in ("memory", "unified/memory.max", "memory.max")):
        return "the real node needs the cgroup memory controller (/sys/fs/cgroup)"
    return None


@dataclass(frozen=True)
class Prepared:
    kubelet: Path
    images: NodeImages
    kube_proxy: Path


def _script(component: str, script: str) -> Path:
    """The folder `hack/<component>/<script>` prints; NodeUnavailable on its exit code 3
    (the tools cannot be had: its stderr line says why), NodeError on any other failure."""
    proc = subprocess.Popen([str(HACK / component / script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stdout is not None
    last = f"hack/{component}/{script}: exit code 3"
    for line in proc.stderr:  # a first build's progress, as it comes
        sys.stderr.write(line)
        last = line.strip() or last
    lines = proc.stdout.read().strip().splitlines()
    if proc.wait() == 3:
        raise NodeUnavailable(last)
    if proc.returncode != 0 or not lines:
        raise NodeError(f"hack/{component}/{script} failed with exit code {proc.returncode} "
                        "(its stderr says why)")
    return Path(lines[-1])


def prepare() -> Prepared:
    """Builds (or finds cached) what the node runs; NodeUnavailable when this machine
    cannot hold one."""
    missing = unavailable()
    if missing:
        raise NodeUnavailable(missing)
    images = NodeImages.load(_script("node-images", "build"))
    kubelet = _script("kubelet", "build") / "kubelet"
    kube_proxy = _script("kube-proxy", "build") / "kube-proxy"
    for tool in TOOLS:
        if shutil.which(tool, path=PATH) is None:
            raise NodeUnavailable(f"the real node needs {tool} (make node installs it)")
    for plugin in CNI_PLUGINS:
        if not (CNI_BIN / plugin).exists():
            raise NodeUnavailable(f"the real node needs the CNI plugin {CNI_BIN / plugin} "
                                  "(make node installs containernetworking-plugins)")
    why = netns.available() or _netfilter_unavailable()
    if why:
        raise NodeUnavailable(f"the real node needs a network namespace of its own: {why}")
    return Prepared(kubelet, images, kube_proxy)


def _netfilter_unavailable() -> str | None:
    """Why kube-proxy could not program Services in a new network namespace (its NAT
    table), or None."""
    probe = subprocess.run(["unshare", "--net", "iptables", "-t", "nat", "-L", "-n"],
                           capture_output=True, text=True, env={"PATH": PATH})
    if probe.returncode == 0:
        return None
    lines = (probe.stderr.strip() or f"exit code {probe.returncode}").splitlines()
    return f"kube-proxy needs netfilter's NAT table (iptables: {lines[0]})"


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class RealNode:
    """The node's processes in `workdir`, against `cluster`. start() / stop()."""

    def __init__(self, workdir: Path, cluster: LocalCluster, prepared: Prepared,
                 kubelet_client_ca: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.images = prepared.images
        self.registry = Registry(workdir, prepared.images)
        self._kubelet_bin = prepared.kubelet
        self._kube_proxy_bin = prepared.kube_proxy
        self.kubelet_port = free_port()
        # The Unix sockets between the host and the node's network namespace: a short
        # folder of its own (a socket's path is 108 bytes at most; the stack's folder can
        # be near that already), removed at stop.
        self.net_folder: Path | None = None
        self._client_ca = kubelet_client_ca
        self.name = NODE
        self.git_port = free_port()
        self.git_root = workdir / "git"
        self.cgroup_root = CGROUP_PREFIX + secrets.token_hex(4)
        # The registry, the Git server, then the supervisor of containerd and the kubelet.
        self._children = Children(workdir, error=NodeError, grace=2.0)
        self.timings: dict[str, float] = {}

    # -- what a test uses ------------------------------------------------------------

    def git_url(self, repository: str) -> str:
        return f"http://127.0.0.1:{self.git_port}/{repository}.git"

    def create_repository(self, name: str, files: Mapping[str, str]) -> gitserver.Commit:
        """A repository the Git server serves at git_url(name), one commit of `files`."""
        return gitserver.create_repository(self.git_root, name, files)

    def serve_github(self, pod: JSON) -> list[JSON]:
        """JSON patch operations (RFC 6902) that give each of `pod`'s containers Git
        configuration in its environment (GIT_CONFIG_COUNT, Git 2.31 and later; git reads
        it in every command, Shipwright's git step included) fetching
        https://github.com/<owner>/<name> from this Git server's <owner>/<name>.git: for a
        mutating webhook, where a pod's source names a GitHub repository this machine
        cannot reach and the Git server has a stand-in for (create_repository).
        """
        env = [{"name": "GIT_CONFIG_COUNT", "value": "1"},
               {"name": "GIT_CONFIG_KEY_0",
                "value": f"url.http://127.0.0.1:{self.git_port}/.insteadOf"},
               {"name": "GIT_CONFIG_VALUE_0", "value": GITHUB}]
        ops: list[JSON] = []
        for i, container in enumerate((pod.get("spec") or {}).get("containers") or []):
            path = f"/spec/containers/{i}/env"
            if container.get("env"):
                ops += [{"op": "add", "path": f"{path}/-", "value": var} for var in env]
            else:
                ops.append({"op": "add", "path": path, "value": env})
        return ops

    def network_namespace(self) -> Path:
        """The node's network namespace (its supervisor's), for a process to join with
        `nsenter --net=` or a socket to be made in (devtools.cluster.netns.serve_into)."""
        pid = self._children.pids().get(SUPERVISOR)
        if pid is None:
            raise NodeError("the node is not running")
        return Path(f"/proc/{pid}/ns/net")

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        t0 = time.monotonic()
        try:
            self._spawn("registry", self.registry.argv())
            self._start_git_server()
            net = self._start_gateway()
            await self._wait("the network gateway",
                             lambda: all(netns.tcp_socket(net, p).exists()
                                         for p in self._forwarded_ports()))
            self._start_node(net)
            await self._wait("registry", self.registry.serving)
            await self._wait("git server", lambda: _port_open(self.git_port))
            self.timings["registry and git server"] = round(time.monotonic() - t0, 2)
            await self._node_ready()
            self.timings["node ready"] = round(time.monotonic() - t0, 2)
            await self.publish_apiserver()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops the node (nodens stops the kubelet, containerd and everything they left),
        then the Git server and the registry; removes the node's big folders."""
        t0 = time.monotonic()
        self._children.stop_all()
        if self.net_folder is not None:
            shutil.rmtree(self.net_folder, ignore_errors=True)
        # The images' unpacked layers and the kubelet's state with the pods' volumes:
        # hundreds of MB per run. The pods' logs (ns/var-log-upper/pods) are kept.
        for big in ("containerd/root", "ns/var-lib-upper", "ns/run-upper"):
            shutil.rmtree(self.workdir / big, ignore_errors=True)
        self.timings["stop"] = round(time.monotonic() - t0, 2)

    def check_alive(self) -> None:
        """NodeError, with the tail of its log, if one of the node's processes has exited."""
        self._children.check_alive()

    async def restart(self, name: str, sig: int = signal.SIGTERM,
                      timeout: float = 120.0) -> Restart:
        """Restarts CONTAINERD or KUBELET with `sig` (SIGTERM as `systemctl restart`, SIGKILL
        a crash) while the pods run on; returns what nodens did, once the new process
        serves: containerd's socket made again, or the kubelet's Ready status posted after
        it started (and the not-ready taint, should it come back, removed)."""
        if name not in (CONTAINERD, KUBELET):
            raise ValueError(f"the node restarts {CONTAINERD} or {KUBELET}, not {name!r}")
        control = self.workdir / "control"
        answer = control / (RESTARTED + name)
        answer.unlink(missing_ok=True)
        request = control / (RESTART + name)
        partial = control / f".{request.name}"  # not a request until renamed
        partial.write_text(signal.Signals(sig).name)
        partial.rename(request)  # nodens reads it whole, or not at all
        await self._wait(f"{name} restart", answer.exists, timeout)
        done = Restart.read(answer)
        if name == KUBELET:
            await self._node_ready(timeout, heartbeat_after=done.started_at)
        return done

    async def publish_apiserver(self) -> None:
        """The `kubernetes` Service's endpoint: the API server's port at the node's address,
        where the node's network namespace forwards it to the host's 127.0.0.1 (the API
        server cannot advertise a loopback address: Endpoints refuse one, and a pod's
        loopback is its own). The stack's API server runs with
        --endpoint-reconciler-type=none, so this is its only writer; kube-proxy reads the
        EndpointSlice (no endpointslice-mirroring controller runs to make it from the
        Endpoints), in-cluster clients the Endpoints."""
        port = self.cluster.port
        subsets = [{"addresses": [{"ip": NODE_IP}],
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]
        await self.cluster.apply({"apiVersion": "v1", "kind": "Endpoints",
                                  "metadata": {"name": "kubernetes", "namespace": "default"},
                                  "subsets": subsets})
        await self.cluster.apply({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})

    # -- pieces ----------------------------------------------------------------------

    def _forwarded_ports(self) -> list[int]:
        """The host's 127.0.0.1 ports served inside the node's network namespace."""
        return [self.cluster.port, self.registry.port, self.git_port]

    def _start_gateway(self) -> Path:
        """The host's side of the node's network namespace (devtools.cluster.netns)."""
        self.net_folder = Path(tempfile.mkdtemp(prefix="buildrun-node-net-"))
        ports = [arg for port in self._forwarded_ports() for arg in ("--port", str(port))]
        self._spawn("network-gateway",
                    [sys.executable, "-m", "devtools.cluster.netns", "--gateway",
                     "--folder", str(self.net_folder), *ports,
                     "--reverse", str(self.kubelet_port)],
                    {"PATH": PATH, "PYTHONPATH": str(REPO), "HOME": str(self.workdir)})
        return self.net_folder

    async def _wait(self, what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
        """Until `check()` (blocking: run in a thread); NodeError as soon as one of the
        node's processes has died, or at the timeout."""
        if not await wait_until(lambda: asyncio.to_thread(check), timeout, 0.1,
                                alive=self.check_alive):
            raise NodeError(f"{what}: not ready after {timeout:.0f}s (logs in {self.workdir})")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self._children.spawn(name, argv, env or {"PATH": PATH, "HOME": str(self.workdir)})

    def _start_git_server(self) -> None:
        self.git_root.mkdir(exist_ok=True)
        self._spawn("git-server", [sys.executable, "-m", "devtools.node.gitserver",
                                   str(self.git_root), str(self.git_port)],
                    {"PATH": PATH, "PYTHONPATH": str(REPO), "HOME": str(self.workdir)})

    def _containerd_config(self, sock: Path) -> Path:
        cri = "io.containerd.grpc.v1.cri"
        mirrors = {host: {"endpoint": [f"http://{self.registry.address}"]}
                   for host in self.registry.hosts()}
        config = {
            "version": 2,
            "root": str(self.workdir / "containerd" / "root"),
            "state": str(self.workdir / "containerd" / "state"),
            "disabled_plugins": [
                "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
            ],
            "grpc": {"address": str(sock)},
            "ttrpc": {"address": f"{sock}.ttrpc"},
            "debug": {"address": ""},
            "metrics": {"address": ""},
            "plugins": {
                "io.containerd.internal.v1.opt": {"path": str(self.workdir / "containerd" / "opt")},
                cri: {
                    "sandbox_image": self.images.pause,
                    # Root here may lack CAP_SYS_RESOURCE: without it runc fails every
                    # container with "can't get final child's PID from pipe: EOF".
                    "restrict_oom_score_adj": True,
                    "disable_apparmor": True,
                    "stream_server_address": "127.0.0.1",
                    "stream_server_port": "0",
                    "containerd": {
                        "snapshotter": "overlayfs",
                        "default_runtime_name": "runc",
                        "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                              "options": {"SystemdCgroup": False}}},
                    },
                    "cni": {"bin_dir": str(CNI_BIN), "conf_dir": str(self.workdir / "cni")},
                    "registry": {"mirrors": mirrors},
                },
            },
        }
        path = self.workdir / "containerd.toml"
        path.write_text(_toml(config))
        cni = self.workdir / "cni"
        cni.mkdir(exist_ok=True)
        (cni / CNI_CONFIG).write_text(json.dumps(pod_network()))
        return path

    def _kubelet_config(self, sock: Path) -> Path:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            # The host's 127.0.0.1 at this port reaches it (the network gateway).
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            # The API server's pods/log and exec calls come with its kubelet client cert.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self._client_ca)}},
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup_root}",
            "cgroupsPerQOS": True,
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{sock}",
            "imageServiceEndpoint": f"unix://{sock}",
            "volumePluginDir": str(self.workdir / "volume-plugins"),
            "makeIPTablesUtilChains": False,
            "registerWithTaints": [{"key": LABEL, "value": REAL, "effect": "NoSchedule"}],
            "serializeImagePulls": False,
            # The machine's disk is shared: never evict a build for what others use.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "resolvConf": "/etc/resolv.conf",
            "shutdownGracePeriod": "0s",
        }
        path = self.workdir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _kube_proxy_config(self) -> Path:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.cluster.kubeconfig)},
            "hostnameOverride": NODE,
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            # Every packet to a Service leaves with the node's address: a pod that calls a
            # Service backed by a pod on the same bridge then gets the answer back through
            # the node, without br_netfilter in the namespace.
            "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
            # nf_conntrack_max and its timeouts are the host's (not per namespace): leave them.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            # Inside the node's namespace: fixed ports collide with nothing there.
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
        }
        path = self.workdir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _start_node(self, net: Path) -> None:
        containerd_dir = self.workdir / "containerd"
        containerd_dir.mkdir(exist_ok=True)
        # In the node's own /run (an overlay, nodens): a socket path may be 104 bytes at
        # most, and the stack's folder can be longer than that already.
        sock = Path(CONTAINERD_SOCKET)
        containerd_config = self._containerd_config(sock)
        kubelet_config = self._kubelet_config(sock)
        kube_proxy_config = self._kube_proxy_config()
        env = {"PATH": PATH, "HOME": str(self.workdir)}
        ports = [arg for port in self._forwarded_ports() for arg in ("--port", str(port))]
        control = self.workdir / "control"  # restart requests (restart())
        control.mkdir(exist_ok=True)
        spec = {
            "state": str(self.workdir / "ns"),
            "control": str(control),
            "overlays": list(OVERLAYS),
            "cgroup_root": self.cgroup_root,
            "ready": str(self.workdir / "ns.ready"),
            "grace": 5,
            "children": [
                # The namespace's loopback up with the node's address, and the host's ports
                # served on it (module doc): before anything that connects.
                {"name": NETWORK, "log": str(self.workdir / "network.log"),
                 "env": {**env, "PYTHONPATH": str(REPO)},
                 "argv": [sys.executable, "-m", "devtools.cluster.netns", "--folder", str(net),
                          *ports, "--listen", "0.0.0.0", "--address", f"{NODE_IP}/32",
                          "--reverse", str(self.kubelet_port),
                          "--ready", str(net / "inside.ready")],
                 "wait_for": str(net / "inside.ready")},
                {"name": CONTAINERD, "log": str(self.workdir / "containerd.log"), "env": env,
                 "argv": ["containerd", "--config", str(containerd_config)],
                 "wait_for": str(sock)},
                {"name": KUBELET, "log": str(self.workdir / "kubelet.log"), "env": env,
                 "argv": [str(self._kubelet_bin), f"--config={kubelet_config}",
                          f"--kubeconfig={self.cluster.kubeconfig}",
                          f"--hostname-override={NODE}",
                          f"--node-ip={NODE_IP}",
                          f"--node-labels={LABEL}={REAL}",
                          "--v=1"]},
                {"name": KUBE_PROXY, "log": str(self.workdir / "kube-proxy.log"), "env": env,
                 "argv": [str(self._kube_proxy_bin), f"--config={kube_proxy_config}", "--v=1"]},
            ],
        }
        spec_path = self.workdir / "node.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        # SIGTERM when this process dies, or is stopped: nodens then stops all it started,
        # which may take a while (each child's grace, then every shim and container).
        self._children.spawn(
            SUPERVISOR,
            ["unshare", "--mount", "--net", "--propagation", "private", "--",
             sys.executable, "-m", "devtools.node.nodens", str(spec_path)],
            {"PATH": PATH, "PYTHONPATH": str(REPO), "HOME": str(self.workdir)},
            log=self.workdir / "node.log", death_signal=signal.SIGTERM, grace=60.0)

    async def _node_ready(self, timeout: float = 120.0,
                          heartbeat_after: float | None = None) -> None:
        """Waits for the node's Ready condition (posted at or after `heartbeat_after`, a
        wall-clock time: by a kubelet started then), then removes the not-ready taint."""
        async def ready() -> bool:
            try:
                node = await self.cluster.request("GET", f"/api/v1/nodes/{NODE}")
            except RuntimeError:
                return False
            conditions = {c["type"]: c
                          for c in (node.get("status") or {}).get("conditions") or []}
            condition = conditions.get("Ready") or {}
            if condition.get("status") != "True":
                return False
            if heartbeat_after is None:
                return True
            beat = parse_time(condition.get("lastHeartbeatTime"))
            # The API server's times are whole seconds.
            return beat is not None and beat.timestamp() >= int(heartbeat_after)

        if not await wait_until(ready, timeout, 0.2, alive=self.check_alive):
            raise NodeError(f"kubelet: node {NODE} not Ready after {timeout:.0f}s "
                            f"(log: {self.workdir / 'kubelet.log'})")
        # The kubelet registers with node.kubernetes.io/not-ready:NoSchedule, which the node
        # lifecycle controller removes once the node is Ready. The stack does not run that
        # controller (kwok's node sends no heartbeats: it would be tainted unreachable and
        # its pods evicted), so this does what it would, at start and after a restart.
        node = await self.cluster.request("GET", f"/api/v1/nodes/{NODE}")
        taints = [t for t in node["spec"].get("taints") or []
                  if t["key"] != "node.kubernetes.io/not-ready"]
        await self.cluster.request("PATCH", f"/api/v1/nodes/{NODE}",
                                   {"spec": {"taints": taints}},
                                   content_type="application/merge-patch+json")


CNI_CONFIG = "10-buildrun-pods.conflist"


def pod_network() -> JSON:
    """The node's CNI configuration: a bridge whose address is the pods' gateway, each pod
    an address of POD_CIDR (host-local), ports mapped for hostPort (portmap). All in the
    node's network namespace, where containerd runs the plugins."""
    return {"cniVersion": "0.4.0", "name": "buildrun-pods", "plugins": [
        {"type": "bridge", "bridge": CNI_BRIDGE, "isGateway": True, "ipMasq": False,
         "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                  "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]}


def _toml(config: Mapping[str, Any], prefix: str = "") -> str:
    """The little TOML containerd's configuration needs: tables of strings, numbers,
    booleans and lists of strings."""
    lines, tables = [], []
    for key, value in config.items():
        name = json.dumps(key) if any(c in key for c in ".:/") else key
        if isinstance(value, Mapping):
            tables.append((f"{prefix}.{name}" if prefix else name, value))
        else:
            lines.append(f"{name} = {json.dumps(value)}")
    out = "\n".join(lines) + "\n" if lines else ""
    for name, table in tables:
        out += f"\n[{name}]\n" + _toml(table, name)
    return out

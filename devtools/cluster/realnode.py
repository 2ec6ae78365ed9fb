"""A real node in the test stack: containerd and a real kubelet that run the pods sent to
them, beside kwok's node, with a registry and a Git server on loopback.

devtools.cluster.stack.TektonStack(real_node=True) prepares it (`prepare()`: the kubelet
from hack/kubelet/build, every image from hack/node-images/build, both cached by
content) and `await stack.real_node()` starts it the first time a caller asks:

  docker-registry   Debian's (distribution 2.8), on 127.0.0.1:<port>, its storage a copy
                    of the one hack/node-images/build filled (blobs hard-linked), so it
                    starts with every image a pod here needs; builds push to it
  git server        devtools.cluster.gitserver on 127.0.0.1:<port>, serving the bare
                    repositories `create_repository` makes; stands in for GitHub
  containerd        Debian's 1.6, its root, state and socket in the stack's folder, the
                    registry as mirror of buildrun.test, quay.io and docker.io (so a pod
                    names an image as Shipwright's samples do and containerd pulls it
                    from here; STAND_INS are served under the names a strategy gives)
  kubelet           v1.34 (the API server's module), node "localhost", labelled and
                    tainted `buildrun-controller.test/node=real`

containerd and the kubelet run in a mount namespace of their own under a supervisor
(devtools.cluster.nodens) that keeps everything they write outside their folders in the
stack's folder, and kills every process they leave when the stack stops. In there they
keep their defaults where those are hard-coded or make socket paths too long for the
stack's folder: the kubelet's root is /var/lib/kubelet, pods' logs /var/log/pods,
containerd's socket /run/containerd/containerd.sock, all of them in the namespace's
overlays, i.e. <stack>/node/ns/{var-lib,var-log,run}-upper/. containerd's root and state
are <stack>/node/containerd/. stop() removes the big ones (unpacked images, pods'
volumes) and keeps the logs.

A pod runs here only when it asks to: `placement()` is the nodeSelector and toleration a
Build (or BuildRun) gives, as a user would, and the scheduler does the rest. Every pod
uses the host's network (Tekton's config-defaults `default-pod-template`, set by the
stack): there is no pod network, only loopback, so a build reaches the registry and the
Git server at 127.0.0.1.

`await node.restart("containerd" | "kubelet", signal)` restarts one of the two while the
pods run on, as a node's service manager would (devtools.cluster.nodens: the containers
are kept; a new containerd finds them, a new kubelet its pods); a soak's fault.

Where the machine cannot hold a real node, `unavailable()` says what is missing in one
line (and tests skip with it): no root, no overlayfs, no cgroup memory controller, or
the Debian tools cannot be installed.

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
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from controller.runtime.timestamps import parse_time
from devtools.cluster import gitserver
from devtools.cluster.localcluster import REPO, ChildProcess, LocalCluster, free_port
from devtools.cluster.nodens import RESTART, RESTARTED, Restart
from devtools.cluster.processes import dies_with_parent

HACK = REPO / "hack"
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
# The node's children, in the order nodens starts them; each can be restart()ed.
CONTAINERD, KUBELET = "containerd", "kubelet"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "docker-registry", "unshare",
         "mount")

JSON = dict[str, Any]
# Images Shipwright's strategies name that the node serves as one built here, under the
# strategy's own name (as buildah is Debian's under quay.io's): its integration suite's
# error-result strategy runs `sh -c 'printf ...; return 1'` on alpine:latest, whose sh
# is BusyBox's ash, which is what the shell image is. name -> NodeImages attribute.
STAND_INS = {"docker.io/library/alpine:latest": "shell"}
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
class NodeImages:
    """What hack/node-images/build made (its images.json) and the registry storage."""

    folder: Path
    pause: str
    shell: str  # Tekton's shell image; busybox, also the sample's base image
    tekton: Mapping[str, str]  # entrypoint, nop, workingdirinit, sidecarlogresults
    shipwright: Mapping[str, str]  # git, bundle, waiter, image-processing
    buildah: tuple[str, ...]  # quay.io/containers/buildah:<tag> as Shipwright's samples name it
    mirrors: tuple[str, ...]  # registry hosts served from the stack's registry

    @classmethod
    def load(cls, folder: Path) -> NodeImages:
        data = json.loads((folder / "images.json").read_text())
        return cls(folder, data["pause"], data["shell"], data["tekton"], data["shipwright"],
                   tuple(data["buildah"]), tuple(data["mirrors"]))

    def tekton_flags(self) -> dict[str, str]:
        """Tekton controller flags naming these images (its config/controller.yaml's)."""
        return {"-entrypoint-image": self.tekton["entrypoint"],
                "-nop-image": self.tekton["nop"],
                "-sidecarlogresults-image": self.tekton["sidecarlogresults"],
                "-workingdirinit-image": self.tekton["workingdirinit"],
                "-shell-image": self.shell}

    def shipwright_env(self) -> dict[str, str]:
        """The environment variables Shipwright's controller (and ours) reads the helper
        steps' images from (controller.buildrun.config)."""
        return {"GIT_CONTAINER_IMAGE": self.shipwright["git"],
                "BUNDLE_CONTAINER_IMAGE": self.shipwright["bundle"],
                "WAITER_CONTAINER_IMAGE": self.shipwright["waiter"],
                "IMAGE_PROCESSING_CONTAINER_IMAGE": self.shipwright["image-processing"]}

    def in_registry(self, registry: str, image: str) -> str:
        """`image` (named under one of the mirrored hosts) as pulled from `registry`."""
        host, _, rest = image.partition("/")
        assert host in self.mirrors, image
        return f"{registry}/{rest}"

    def stand_ins(self) -> dict[str, str]:
        """STAND_INS as name -> the image of this set served under it."""
        return {name: getattr(self, attribute) for name, attribute in STAND_INS.items()}


@dataclass(frozen=True)
class Prepared:
    kubelet: Path
    images: NodeImages


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
    for tool in TOOLS:
        if shutil.which(tool, path=PATH) is None:
            raise NodeUnavailable(f"the real node needs {tool} (make node installs it)")
    return Prepared(kubelet, images)


def _copy_registry(source: Path, target: Path) -> None:
    """The registry's storage: blobs hard-linked (written once, never changed in place),
    the rest (tag and layer links, which a push rewrites in place) copied."""
    v2 = Path("docker/registry/v2")
    (target / v2).mkdir(parents=True)
    subprocess.run(["cp", "-a", "--link", str(source / v2 / "blobs"), str(target / v2)],
                   check=True)
    shutil.copytree(source / v2 / "repositories", target / v2 / "repositories", symlinks=True)


def _repository_and_tag(image: str) -> tuple[str, str]:
    """("library/busybox", "1.35.0") for "buildrun.test/library/busybox:1.35.0"."""
    _, _, rest = image.partition("/")
    repository, _, tag = rest.rpartition(":")
    return repository, tag


def _tag_as(storage: Path, image: str, name: str) -> None:
    """The registry's `image` also served as `name` (another host's name is fine: the
    registry mirrors it), before the registry starts: its repository's folder copied
    (the links to its blobs, each a few bytes) with the tag renamed."""
    repositories = storage / "docker/registry/v2/repositories"
    (source, tag), (target, new_tag) = _repository_and_tag(image), _repository_and_tag(name)
    shutil.copytree(repositories / source, repositories / target, symlinks=True)
    tags = repositories / target / "_manifests/tags"
    for other in tags.iterdir():
        if other.name != tag:
            shutil.rmtree(other)
    (tags / tag).rename(tags / new_tag)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except (urllib.error.URLError, OSError):
        return False


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
        self._kubelet_bin = prepared.kubelet
        self._client_ca = kubelet_client_ca
        self.name = NODE
        self.registry_port = free_port()
        self.registry = f"127.0.0.1:{self.registry_port}"
        self.git_port = free_port()
        self.git_root = workdir / "git"
        self.cgroup_root = CGROUP_PREFIX + secrets.token_hex(4)
        self._children: list[ChildProcess] = []
        self._holder: subprocess.Popen[bytes] | None = None
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

    def base_image(self) -> str:
        """An image to build FROM, as a build in a pod here pulls it (over plain HTTP)."""
        return self.images.in_registry(self.registry, self.images.shell)

    def image(self, repository: str, tag: str = "latest") -> str:
        """Where a build pushes: `repository` in the stack's registry."""
        return f"{self.registry}/{repository}:{tag}"

    def manifest_digest(self, repository: str, tag: str = "latest") -> str | None:
        """The registry's digest of `repository:tag` (its Docker-Content-Digest, as a
        client resolving the tag sees it); None when it has no such manifest."""
        accept = ", ".join(("application/vnd.oci.image.index.v1+json",
                            "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))
        request = urllib.request.Request(
            f"http://{self.registry}/v2/{repository}/manifests/{tag}", method="HEAD",
            headers={"Accept": accept})
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return str(resp.headers["Docker-Content-Digest"])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def pushed(self, image: str) -> str | None:
        """manifest_digest of `image` as a build names its output (`image(...)`): what
        the registry holds under that tag, None when nothing was pushed there."""
        host, _, _ = image.partition("/")
        if host != self.registry:
            raise ValueError(f"{image} is not in this node's registry ({self.registry})")
        return self.manifest_digest(*_repository_and_tag(image))

    # -- life cycle ------------------------------------------------------------------

    async def start(self) -> None:
        t0 = time.monotonic()
        try:
            self._start_registry()
            self._start_git_server()
            self._start_node()
            await self._wait("registry", lambda: _http_ok(f"http://{self.registry}/v2/"))
            await self._wait("git server", lambda: _port_open(self.git_port))
            self.timings["registry and git server"] = round(time.monotonic() - t0, 2)
            await self._node_ready()
            self.timings["node ready"] = round(time.monotonic() - t0, 2)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops the node (nodens stops the kubelet, containerd and everything they left),
        then the Git server and the registry; removes the node's big folders."""
        t0 = time.monotonic()
        holder, self._holder = self._holder, None
        if holder is not None and holder.poll() is None:
            holder.send_signal(signal.SIGTERM)
            try:
                holder.wait(60)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()
        for child in reversed(self._children):
            child.stop(timeout=2.0)
        self._children.clear()
        # The images' unpacked layers and the kubelet's state with the pods' volumes:
        # hundreds of MB per run. The pods' logs (ns/var-log-upper/pods) are kept.
        for big in ("containerd/root", "ns/var-lib-upper", "ns/run-upper"):
            shutil.rmtree(self.workdir / big, ignore_errors=True)
        self.timings["stop"] = round(time.monotonic() - t0, 2)

    def check_alive(self) -> None:
        for child in self._children:
            child.check_alive()
        if self._holder is not None and self._holder.poll() is not None:
            tail = (self.workdir / "node.log").read_text(errors="replace")[-3000:]
            raise NodeError(f"the real node's supervisor exited with {self._holder.returncode}:"
                            f"\n{tail}")

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

    # -- pieces ----------------------------------------------------------------------

    async def _wait(self, what: str, check: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not await asyncio.to_thread(check):
            self.check_alive()
            if time.monotonic() > deadline:
                raise NodeError(f"{what}: not ready after {timeout:.0f}s (logs in {self.workdir})")
            await asyncio.sleep(0.1)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        child = ChildProcess(name, argv, self.workdir / f"{name}.log",
                             env or {"PATH": PATH, "HOME": str(self.workdir)})
        child.start()
        self._children.append(child)

    def _start_registry(self) -> None:
        storage = self.workdir / "registry"
        _copy_registry(self.images.folder / "registry", storage)
        for name, image in self.images.stand_ins().items():
            _tag_as(storage, image, name)
        config = self.workdir / "registry.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(storage)},
                        "delete": {"enabled": True}},
            "http": {"addr": self.registry, "secret": secrets.token_hex(16)},
        }))
        self._spawn("registry", ["docker-registry", "serve", str(config)])

    def _start_git_server(self) -> None:
        self.git_root.mkdir(exist_ok=True)
        self._spawn("git-server", [sys.executable, "-m", "devtools.cluster.gitserver",
                                   str(self.git_root), str(self.git_port)],
                    {"PATH": PATH, "PYTHONPATH": str(REPO), "HOME": str(self.workdir)})

    def _stand_in_hosts(self) -> list[str]:
        return sorted({name.partition("/")[0] for name in STAND_INS} - set(self.images.mirrors))

    def _containerd_config(self, sock: Path) -> Path:
        cri = "io.containerd.grpc.v1.cri"
        mirrors = {host: {"endpoint": [f"http://{self.registry}"]}
                   for host in (*self.images.mirrors, *self._stand_in_hosts(), self.registry)}
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
                    "cni": {"bin_dir": "/usr/lib/cni", "conf_dir": str(self.workdir / "cni")},
                    "registry": {"mirrors": mirrors},
                },
            },
        }
        path = self.workdir / "containerd.toml"
        path.write_text(_toml(config))
        # The CRI plugin reports the network ready once it has a CNI configuration; pods
        # use the host's network, so loopback alone is all there is.
        cni = self.workdir / "cni"
        cni.mkdir(exist_ok=True)
        (cni / "10-loopback.conflist").write_text(json.dumps(
            {"cniVersion": "0.3.1", "name": "loopback", "plugins": [{"type": "loopback"}]}))
        return path

    def _kubelet_config(self, sock: Path) -> Path:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": free_port(),
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

    def _start_node(self) -> None:
        containerd_dir = self.workdir / "containerd"
        containerd_dir.mkdir(exist_ok=True)
        # In the node's own /run (an overlay, nodens): a socket path may be 104 bytes at
        # most, and the stack's folder can be longer than that already.
        sock = Path(CONTAINERD_SOCKET)
        containerd_config = self._containerd_config(sock)
        kubelet_config = self._kubelet_config(sock)
        env = {"PATH": PATH, "HOME": str(self.workdir)}
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
                {"name": CONTAINERD, "log": str(self.workdir / "containerd.log"), "env": env,
                 "argv": ["containerd", "--config", str(containerd_config)],
                 "wait_for": str(sock)},
                {"name": KUBELET, "log": str(self.workdir / "kubelet.log"), "env": env,
                 "argv": [str(self._kubelet_bin), f"--config={kubelet_config}",
                          f"--kubeconfig={self.cluster.kubeconfig}",
                          f"--hostname-override={NODE}",
                          f"--node-labels={LABEL}={REAL}",
                          "--v=1"]},
            ],
        }
        spec_path = self.workdir / "node.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        log = (self.workdir / "node.log").open("ab")
        try:
            # SIGTERM when this process dies: nodens then stops all it started.
            self._holder = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "--",
                 sys.executable, "-m", "devtools.cluster.nodens", str(spec_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={"PATH": PATH, "PYTHONPATH": str(REPO), "HOME": str(self.workdir)},
                preexec_fn=dies_with_parent(signal.SIGTERM))
        finally:
            log.close()

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

        deadline = time.monotonic() + timeout
        while not await ready():
            self.check_alive()
            if time.monotonic() > deadline:
                raise NodeError(f"kubelet: node {NODE} not Ready after {timeout:.0f}s "
                                f"(log: {self.workdir / 'kubelet.log'})")
            await asyncio.sleep(0.2)
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

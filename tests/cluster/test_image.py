"""The container image itself: built without Docker, run with podman against the real API server.

hack/image/build (run by `make image`, which `make test` depends on, so a cold
build of three to six minutes happens in setup) builds the Dockerfile with buildah
on a debootstrapped local base and exports an OCI archive. Here it is only
called again, and returns at once when nothing changed; a cold build still fits
in these tests' own timeout. The tests skip, with the script's one-line reason,
only when the tools cannot be had (not root, no apt-get, apt cannot install).

The image then runs as the Deployment runs it: its args, its ServiceAccount's
token (minted from manifests/rbac), a read-only root with no tmpfs anywhere,
no capabilities, no privilege escalation, host networking to reach the local
API server. Checked: it runs as UID/GID 65532; /readyz answers 200; /metrics
declares every documented metric; a BuildRun of a missing Build ends
BuildNotFound and one whose TaskRun (run by the session's real Tekton) succeeds
ends Succeeded; `podman stop` ends it within the grace period with exit code 0.
Last, the OCI archive: its config carries the Dockerfile's user, entrypoint,
ports, labels and environment and nothing of the host's pip configuration, and
its root file system (unpacked with umoci) has the virtualenv and no build leftovers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from controller.runtime.kube import LEASES, Kube
from devtools.cluster.localcluster import LocalCluster, free_port, write_token_kubeconfig
from tests.cluster.test_dashboard_metrics import documented_metrics
from tests.harness import World, condition, wait_for
from tests.promtools import parse_exposition
from tests.shipped import listed
from tests.test_dockerfile import env_of, parse_dockerfile

# Found from here, so the file may move deeper into tests/.
REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
BUILD = REPO / "hack" / "image" / "build"
MANIFESTS = REPO / "manifests"
# A cold build takes three to six minutes on two shared cores; `make image` does it before
# the tests, but a direct pytest run on a fresh machine must not time out in setup.
BUILD_TIMEOUT = 1800
CANNOT = 3  # hack/image/build's exit code when the tools cannot be had
NS = "buildrun-controller"
SA = "buildrun-controller"
UID = 65532
# The Deployment's terminationGracePeriodSeconds: the kubelet's SIGKILL comes after it.
GRACE = 45
CONFIG_IN_CONTAINER = "/etc/buildrun-controller"

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(BUILD_TIMEOUT + 300)]

Obj = dict[str, Any]


@dataclass(frozen=True)
class Built:
    image: str
    archive: Path
    env: dict[str, str]  # with CONTAINERS_CONF, for podman

    def podman(self, *args: str, timeout: float = 120, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["podman", *args], env=self.env, capture_output=True,
                                text=True, timeout=timeout)
        if check:
            assert result.returncode == 0, f"podman {args[0]}: {result.stderr[-3000:]}"
        return result


@pytest.fixture(scope="module")
def built() -> Built:
    try:
        result = subprocess.run([str(BUILD)], capture_output=True, text=True,
                                timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hack/image/build took over {BUILD_TIMEOUT} s; run `make image` first")
    if result.returncode == CANNOT:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr[-5000:]
    out = Path(result.stdout.strip().splitlines()[-1])
    env = {**os.environ, "CONTAINERS_CONF": str(out / "containers.conf")}
    image = os.environ.get("IMAGE", "localhost/buildrun-controller:dev")
    return Built(image, out / "buildrun-controller.oci.tar", env)


def final_stage() -> Any:
    _, stages = parse_dockerfile((REPO / "Dockerfile").read_text())
    return stages[-1]


def deployment_container() -> Obj:
    deployment = yaml.safe_load((MANIFESTS / "deployment" / "deployment.yaml").read_text())
    container: Obj = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


# -- the running container ------------------------------------------------------------


@dataclass
class Running:
    built: Built
    name: str
    namespace: str
    metrics_url: str
    probe_url: str

    def logs(self) -> str:
        result = self.built.podman("logs", self.name, check=False)
        return (result.stdout + result.stderr)[-4000:]

    def inspect(self, template: str) -> str:
        return self.built.podman("inspect", "--format", template, self.name).stdout.strip()


async def _get(url: str) -> tuple[int, str]:
    try:
        async with aiohttp.ClientSession() as session, session.get(
            url, timeout=aiohttp.ClientTimeout(total=5)
        ) as resp:
            return resp.status, await resp.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0, ""


async def _service_account_config(cluster: LocalCluster, folder: Path) -> Path:
    """manifests/namespace.yaml and manifests/rbac/ applied as they are, and a folder
    to mount at CONFIG_IN_CONTAINER holding a kubeconfig with a token for the
    ServiceAccount and the API server's CA as a file, readable by the image's user only.

    The CA is a file, as in a pod (the ServiceAccount's ca.crt), not inline
    certificate-authority-data: for inline data kubernetes_asyncio writes a temporary
    file, which a read-only root without a writable /tmp refuses."""
    await cluster.apply(yaml.safe_load((MANIFESTS / "namespace.yaml").read_text()))
    for obj in listed("rbac"):
        await cluster.apply(obj)
    review = await cluster.request(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{SA}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}})
    return _write_config(folder, cluster, review["status"]["token"])


def _write_config(folder: Path, cluster: LocalCluster, token: str) -> Path:
    folder.mkdir()
    shutil.copyfile(cluster.ca_file, folder / "ca.crt")
    write_token_kubeconfig(folder / "kubeconfig", cluster.url,
                           Path(CONFIG_IN_CONTAINER) / "ca.crt",
                           f"system:serviceaccount:{NS}:{SA}", token)
    for path in (folder / "ca.crt", folder / "kubeconfig"):
        path.chmod(0o400)
        os.chown(path, UID, UID)
    folder.chmod(0o500)
    os.chown(folder, UID, UID)
    return folder


@pytest.fixture(scope="module")
async def running(built: Built, cluster: LocalCluster, kube: Kube,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    tmp = tmp_path_factory.mktemp("image")
    config = await _service_account_config(cluster, tmp / "config")
    namespace = f"img-{uuid.uuid4().hex[:8]}"
    await kube.request("POST", "/api/v1/namespaces", body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    # The Deployment's args; out of cluster, endpoints on free loopback ports (the
    # network is the host's), the kubeconfig and the namespace the pod would read
    # from its ServiceAccount, and only this test's namespace watched, as the
    # session's API server is shared with other tests.
    metrics, probes = free_port(), free_port()
    args = [a for a in deployment_container()["args"] if not a.startswith(
        ("--metrics-bind-address", "--health-probe-bind-address"))]
    args += [f"--metrics-bind-address=127.0.0.1:{metrics}",
             f"--health-probe-bind-address=127.0.0.1:{probes}",
             f"--kubeconfig={CONFIG_IN_CONTAINER}/kubeconfig",
             f"--leader-election-namespace={NS}", f"--namespace={namespace}"]
    name = f"buildrun-controller-test-{uuid.uuid4().hex[:8]}"
    # The pod's securityContext: read-only root (and, unlike podman's default, no
    # tmpfs on /tmp, /var/tmp or /run either), no capabilities, no escalation.
    # No --user: the image's own USER must be what applies.
    built.podman(
        "run", "--detach", "--name", name, "--network=host",
        "--read-only", "--read-only-tmpfs=false", "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        "--volume", f"{config}:{CONFIG_IN_CONTAINER}:ro",
        built.image, *args,
    )
    r = Running(built, name, namespace, f"http://127.0.0.1:{metrics}/metrics",
                f"http://127.0.0.1:{probes}")
    try:
        yield r
    finally:
        built.podman("rm", "--force", "--time", "0", name, check=False)


def test_runs_as_65532_on_a_read_only_root(running: Running) -> None:
    assert running.inspect("{{.State.Running}}") == "true", running.logs()
    assert running.inspect("{{.Config.User}}") == "65532:65532"
    assert running.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
    # What the kernel says about the controller process itself (no user namespace,
    # so the host sees the same IDs).
    pid = int(running.inspect("{{.State.Pid}}"))
    status = Path(f"/proc/{pid}/status").read_text()
    ids = {line.split(":")[0]: line.split()[1:] for line in status.splitlines()
           if line.startswith(("Uid:", "Gid:", "CapEff:", "NoNewPrivs:"))}
    assert ids["Uid"] == [str(UID)] * 4 and ids["Gid"] == [str(UID)] * 4, ids
    assert int(ids["CapEff"][0], 16) == 0 and ids["NoNewPrivs"] == ["1"], ids
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert argv[:2] == [b"/opt/venv/bin/python", b"/opt/venv/bin/buildrun-controller"], argv
    # PID 1 in the container, so SIGTERM from `podman stop` reaches it directly.
    nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
    assert nspid.split()[-1] == "1", nspid
    root = next(line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                if line.split()[4] == "/")
    assert "ro" in root[5].split(","), root
    assert not [line for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                if " tmpfs " in line and line.split()[4] in ("/tmp", "/var/tmp", "/run")]


async def test_ready_and_serves_the_documented_metrics(running: Running) -> None:
    async def ready() -> bool:
        assert running.inspect("{{.State.Running}}") == "true", running.logs()
        return (await _get(f"{running.probe_url}/readyz"))[0] == 200

    await wait_for(ready, 90, interval=0.5, what="/readyz to answer 200")
    assert (await _get(f"{running.probe_url}/healthz"))[0] == 200

    status, text = await _get(running.metrics_url)
    assert status == 200
    types, samples = parse_exposition(text)
    missing = documented_metrics() - set(types) - samples
    assert not missing, f"documented but not exported: {sorted(missing)}"
    assert types["controller_runtime_reconcile_total"] == "counter"
    assert types["workqueue_depth"] == "gauge"
    # Zero samples for every error class from the start.
    assert re.search(r'^buildrun_retries_total\{error_class="forbidden"\} 0\.0$', text, re.M)
    # prometheus-client reads the process's figures from /proc inside the container.
    assert "process_resident_memory_bytes" in samples and "python_info" in samples

    async def leader() -> bool:
        _, text = await _get(running.metrics_url)
        return 'leader_election_master_status{name="buildrun-controller"} 1.0' in text

    await wait_for(leader, 60, interval=0.5, what="the container to hold the Lease")


async def test_buildruns_reach_their_outcome(running: Running, kube: Kube) -> None:
    w = World(kube, running.namespace)
    await w.strategy()
    await w.build()

    await w.buildrun("no-build", build_ref="missing")
    missing = await w.finished("no-build", timeout=90)
    assert condition(missing)["reason"] == "BuildNotFound", (missing["status"], running.logs())

    await w.buildrun("ok")
    await w.taskrun_of("ok", timeout=60)
    ok = await w.finished("ok", timeout=60)
    assert condition(ok)["reason"] == "Succeeded", (ok["status"], running.logs())

    _, text = await _get(running.metrics_url)
    for reason in ("BuildNotFound", "Succeeded"):
        sample = (f'buildrun_completed_total{{namespace="{running.namespace}",'
                  f'reason="{reason}"}} 1.0')
        assert sample in text, reason
    retried = [line for line in text.splitlines()
               if line.startswith("buildrun_retries_total{") and not line.endswith(" 0.0")]
    assert retried == [], f"some call was refused or retried: {retried}\n{running.logs()}"
    assert "forbidden" not in running.logs().lower(), running.logs()


# Runs last in this module: it stops the container the tests above share.
async def test_podman_stop_ends_it_cleanly_within_the_grace_period(
    running: Running, kube: Kube
) -> None:
    assert running.inspect("{{.State.Running}}") == "true", running.logs()
    start = time.monotonic()
    result = running.built.podman("stop", "--time", str(GRACE), running.name,
                                  timeout=GRACE + 30, check=False)
    took = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert took < GRACE, f"podman stop took {took:.1f} s: SIGTERM was not enough"
    assert running.inspect("{{.State.ExitCode}}") == "0", running.logs()
    # A clean stop hands the Lease over.
    held = await kube.get(LEASES, NS, "buildrun-controller")
    assert not held["spec"].get("holderIdentity"), held


# -- the OCI archive ------------------------------------------------------------------


def _skopeo_config(built: Built) -> Obj:
    result = subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{built.archive}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    config: Obj = json.loads(result.stdout)
    return config


def _host_pip_values() -> set[str]:
    """Every value of the host's pip configuration, as the build saw it."""
    pipconf = REPO / "hack" / "image" / "pipconf.py"
    out = Path(subprocess.run(["mktemp"], capture_output=True, text=True,
                              check=True).stdout.strip())
    try:
        mounts = subprocess.run(["python3", str(pipconf), str(out)], capture_output=True,
                                text=True, check=True, timeout=60).stdout
        values = {v.strip() for line in out.read_text().splitlines()
                  if "=" in line and not line.startswith("#")
                  for v in line.split("=", 1)[1].split()}
        return values | set(mounts.split())
    finally:
        out.unlink()


def test_archive_config_is_what_the_dockerfile_says(built: Built) -> None:
    config = _skopeo_config(built)
    c = config["config"]
    final = final_stage()
    assert c["User"] == final.all("USER")[0] == "65532:65532"
    assert c["Entrypoint"] == json.loads(final.all("ENTRYPOINT")[0]) == ["buildrun-controller"]
    assert "Cmd" not in c or not c["Cmd"], c.get("Cmd")  # the base's CMD is reset
    assert set(c["ExposedPorts"]) == {
        f"{p}/tcp" for p in " ".join(final.all("EXPOSE")).split()} == {"8080/tcp", "8081/tcp"}
    labels = dict(re.findall(r'([\w.\-]+)="([^"]*)"', " ".join(final.all("LABEL"))))
    assert c["Labels"] == labels, "labels other than the Dockerfile's"
    env = dict(e.split("=", 1) for e in c["Env"])
    for key, value in env_of(final).items():
        if key == "PATH":
            assert env["PATH"].startswith("/opt/venv/bin:") and "$" not in env["PATH"]
        else:
            assert env[key] == value, key
    # Nothing of the build's pip configuration or proxies is kept.
    assert not [k for k in env if k.startswith("PIP_") or k.lower().endswith("_proxy")], env
    kept = json.dumps(config)
    leaked = [v for v in _host_pip_values() if len(v) > 4 and v in kept]
    assert leaked == [], f"the host's pip configuration is in the image config: {leaked}"


@pytest.fixture(scope="module")
def unpacked(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The archive's root file system, unpacked by umoci from the OCI layout in it."""
    tmp = tmp_path_factory.mktemp("oci")
    layout, rootfs = tmp / "layout", tmp / "rootfs"
    with tarfile.open(built.archive) as tar:
        tar.extractall(layout, filter="data")
    index = json.loads((layout / "index.json").read_text())
    [ref] = [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]]
    assert ref == built.image
    result = subprocess.run(["umoci", "raw", "unpack", "--image", f"{layout}:{ref}",
                             str(rootfs)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    yield rootfs
    shutil.rmtree(tmp)


def test_archive_root_has_the_virtualenv_and_no_build_leftovers(unpacked: Path) -> None:
    venv = unpacked / "opt" / "venv"
    script = venv / "bin" / "buildrun-controller"
    assert script.read_text().startswith("#!/opt/venv/bin/python")
    # The venv's python is a symlink to the base's interpreter: /usr/bin/python on
    # the local Debian base, /usr/local/bin/python on python:3.11-slim. Either way
    # it must resolve inside the image.
    target = os.readlink(venv / "bin" / "python")
    assert target.startswith("/"), target
    assert (unpacked / target.lstrip("/")).exists() or \
        (unpacked / target.lstrip("/")).is_symlink(), target
    cfg = dict(line.split(" = ", 1) for line in
               (venv / "pyvenv.cfg").read_text().splitlines() if " = " in line)
    assert cfg["version"].startswith("3.11."), cfg
    assert not (venv / "bin" / "pip").exists()
    site = venv / "lib" / "python3.11" / "site-packages"
    assert (site / "controller" / "cli.py").is_file()
    assert list((site / "controller" / "__pycache__").glob("cli.cpython-311.pyc"))
    assert not list(site.glob("pip")) and not list(site.glob("setuptools"))
    for leftover in ("src", "wheels", "etc/pip.conf", "run/host-pip", "root/.cache/pip"):
        assert not (unpacked / leftover).exists(), leftover

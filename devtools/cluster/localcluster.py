"""A real etcd and kube-apiserver on loopback, for tests and `make dev`.

The binaries come from hack/localcluster/build (compiled from the Go module
proxy and cached outside the repo). Everything else is made per run in a
throwaway folder: certificates, ServiceAccount signing keys, a static token
file with an admin user and a restricted user, and a kubeconfig per user.
The API server runs with RBAC, so permissions are exercised for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import secrets
import signal
import socket
import ssl
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from devtools import hack
from devtools.cluster.certs import issue_serving_cert, make_ca, make_signing_key
from devtools.cluster.processes import Child
from devtools.hack import REPO

CRD_DIRS = (REPO / "manifests" / "crds", REPO / "manifests" / "testing")

ADMIN_USER = "admin"
RESTRICTED_USER = "restricted"


# Where free_port picks: below the kernel's ephemeral range (ip_local_port_range, 32768
# and up on these machines) and below NodePorts (30000-32767), above the well-known ports
# the stack's own parts listen on (the kubelet's 10250, ...).
FREE_PORTS = range(15000, 30000)
_handed_out: set[int] = set()
_pick = random.SystemRandom()  # not the global generator a test may seed
# One file every process on the machine that picks ports here locks a byte of: byte N
# locked is port N claimed (claim_port).
PORT_CLAIMS = Path(tempfile.gettempdir()) / f"buildrun-controller-port-claims-{os.getuid()}"
_claims_fd: int | None = None


def claim_port(port: int) -> bool:
    """Claims `port` among every process on this machine that picks its ports here (the
    test session, Shipwright's suite beside it, a benchmark): a POSIX lock on byte `port`
    of PORT_CLAIMS, held until this process exits, when the kernel drops it. False when
    another living process holds it. A port is picked well before it is bound (Tekton's
    webhook binds its port after the API server is up, and again on each restart), and in
    that window a check by binding cannot see it: make test, 2026-12-07, Shipwright's suite
    picked :15900 for a webhook while the session beside it had picked it for another
    webhook's probes, and the later bind failed with "address already in use"."""
    global _claims_fd
    if _claims_fd is None:
        _claims_fd = os.open(PORT_CLAIMS, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.lockf(_claims_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError:  # EAGAIN or EACCES: another process holds the byte
        return False
    return True


def free_port() -> int:
    """A loopback port nobody listens on now nor has claimed, for a child process to bind
    soon.

    Not bind(0)'s: that port is in the ephemeral range, where any outgoing connection may
    take it before the child binds (CI, 2026-12-06: a kube-controller-manager exited with
    "bind: address already in use" on 127.0.0.1:50207). Random in FREE_PORTS, never the same
    twice in one process, nor one another process has claimed (claim_port)."""
    while True:
        port = _pick.choice(FREE_PORTS)
        if port in _handed_out or not claim_port(port):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


# The Services' range, and the `kubernetes` Service's address in it (its first, as the API
# server allocates it): routed only inside the real node's network namespace.
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
KUBERNETES_SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                            "kubernetes.default.svc.cluster.local")


@dataclass(frozen=True)
class User:
    name: str
    token: str
    groups: tuple[str, ...] = ()


class LocalCluster:
    """etcd + kube-apiserver in `workdir`. Use as `async with LocalCluster(dir) as c:`."""

    def __init__(self, workdir: Path, *, apiserver_args: Iterable[str] = ()) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        bins = hack.build("localcluster")  # built on first use, then cached
        self.etcd_port, self.etcd_peer_port, self.port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.admin = User(ADMIN_USER, secrets.token_hex(16), ("system:masters",))
        self.restricted = User(RESTRICTED_USER, secrets.token_hex(16))
        self.ca = make_ca()
        self.ca_file = self.workdir / "ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem)
        self._write_pki()
        self._etcd = Child("etcd", self._etcd_argv(bins / "etcd"), self.workdir / "etcd.log")
        self._apiserver = Child(
            "kube-apiserver",
            self._apiserver_argv(bins / "kube-apiserver", list(apiserver_args)),
            self.workdir / "kube-apiserver.log",
        )
        self.kubeconfig = self.write_kubeconfig(self.admin)
        self._crds_applied = False

    def _write_pki(self) -> None:
        # The in-cluster names too: a pod on the real node's network (devtools.node.realnode)
        # reaches the API server as any pod does, at the `kubernetes` Service.
        serving = issue_serving_cert(self.ca, ["127.0.0.1", "localhost",
                                               KUBERNETES_SERVICE_IP, *KUBERNETES_SERVICE_NAMES])
        self._serving_cert, self._serving_key = serving.write(self.workdir, "apiserver")
        self._sa_key = self.workdir / "sa.key"
        self._sa_key.write_bytes(make_signing_key())
        self._tokens = self.workdir / "tokens.csv"
        rows = [
            f'{u.token},{u.name},{u.name},"{",".join(u.groups)}"'
            for u in (self.admin, self.restricted)
        ]
        self._tokens.write_text("\n".join(rows) + "\n")

    def _etcd_argv(self, binary: Path) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(binary),
            "--name=default",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            # Test data is throwaway: skipping fsync keeps a 2-core machine responsive.
            "--unsafe-no-fsync",
            # 100,000 finished BuildRuns with their TaskRuns (bench.e2e.restart, issue 42
            # part 4) outgrow etcd's 2 GiB default; 8 GiB is the most etcd recommends.
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]

    def _apiserver_argv(self, binary: Path, extra: list[str]) -> list[str]:
        return [
            str(binary),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self._serving_cert}",
            f"--tls-private-key-file={self._serving_key}",
            f"--token-auth-file={self._tokens}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={self._sa_key}",
            f"--service-account-signing-key-file={self._sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--api-audiences=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            # As kubeadm sets it: Shipwright's buildah samples run privileged steps.
            "--allow-privileged=true",
            "-v=1",
            *extra,
        ]

    def write_kubeconfig(self, user: User, path: Path | None = None) -> Path:
        """A kubeconfig that authenticates as `user` with its bearer token."""
        path = path or self.workdir / f"kubeconfig-{user.name}"
        return write_token_kubeconfig(path, self.url, self.ca_file, user.name, user.token)

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    async def start(self) -> None:
        try:
            await self.start_bare()
            await self.apply_crds()
        except BaseException:
            self.stop()
            raise

    async def start_bare(self) -> None:
        """etcd and kube-apiserver, no CRDs (the caller chooses which to apply)."""
        self._etcd.start()
        await self._wait_etcd()
        await self.start_apiserver()

    @property
    def service_account_key(self) -> Path:
        """The key the API server verifies ServiceAccount tokens with, for a token signer
        (kube-controller-manager's --service-account-private-key-file)."""
        return self._sa_key

    def pids(self) -> dict[str, int]:
        """The running children's process ids by name."""
        return {p.name: p.pid for p in (self._etcd, self._apiserver) if p.pid is not None}

    def stop(self) -> None:
        self._apiserver.stop()
        self._etcd.stop()

    def stop_apiserver(self, sig: int = signal.SIGTERM) -> None:
        self._apiserver.stop(sig)

    async def start_apiserver(self) -> None:
        self._apiserver.start()
        await self._wait_ready()
        if self._crds_applied:
            # /readyz can pass while custom resource storage still answers 429.
            await _poll(f"{self.url}/apis/shipwright.io/v1beta1/buildruns?limit=1",
                        self.ssl_context(), self.admin.token, 60, self._apiserver.check_alive,
                        "custom resource storage")

    async def restart_apiserver(self, sig: int = signal.SIGKILL) -> None:
        """Kill the API server and start it again on the same port and etcd."""
        self.stop_apiserver(sig)
        await self.start_apiserver()

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    async def _wait_etcd(self, timeout: float = 30.0) -> None:
        await _poll(
            f"{self.etcd_url}/health", None, None, timeout, self._etcd.check_alive, "etcd"
        )

    async def _wait_ready(self, timeout: float = 90.0) -> None:
        await _poll(
            f"{self.url}/readyz",
            self.ssl_context(),
            self.admin.token,
            timeout,
            self._apiserver.check_alive,
            "kube-apiserver",
        )

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> Any:
        """A raw admin request, for setup that needs no client library."""
        headers = {"Authorization": f"Bearer {self.admin.token}", "Content-Type": content_type}
        data = body if isinstance(body, (bytes, str)) or body is None else orjson.dumps(body)
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, self.url + path, data=data, headers=headers, ssl=self.ssl_context()
            ) as resp,
        ):
            text = await resp.read()
            if resp.status >= 400:
                raise RuntimeError(f"{method} {path}: {resp.status} {text[:500]!r}")
            return orjson.loads(text) if text else None

    async def apply_crds(self, folders: Iterable[Path] = CRD_DIRS) -> None:
        for folder in folders:
            for file in sorted(folder.glob("*.yaml")):
                for doc in yaml.safe_load_all(file.read_text()):
                    await self.apply(doc)
        await self.wait_crds_established()
        self._crds_applied = True

    async def apply(self, obj: dict[str, Any]) -> Any:
        """Server-side apply of one object whose resource path this helper knows."""
        path = _resource_path(obj)
        return await self.request(
            "PATCH",
            f"{path}?fieldManager=localcluster&force=true",
            orjson.dumps(obj),
            content_type="application/apply-patch+yaml",
        )

    async def wait_crds_established(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            crds = await self.request(
                "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
            )
            pending = [
                c["metadata"]["name"]
                for c in crds["items"]
                if not any(
                    cond["type"] == "Established" and cond["status"] == "True"
                    # A CRD created a moment ago may show "conditions": null.
                    for cond in (c.get("status") or {}).get("conditions") or []
                )
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRDs not established: {pending}")
            await asyncio.sleep(0.1)

    async def compact_etcd(self) -> int:
        """Compact etcd at its current revision, so older resourceVersions give 410 Gone."""
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{self.etcd_url}/v3/kv/range", json={"key": "AA=="}) as r:
                revision = int((await r.json())["header"]["revision"])
            async with session.post(
                f"{self.etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}
            ) as r:
                r.raise_for_status()
        return revision


_CORE_PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "Service": "services",
    "Endpoints": "endpoints",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "StorageClass": "storageclasses",
}


def _resource_path(obj: dict[str, Any]) -> str:
    """The REST path for the kinds this helper applies (CRDs, RBAC, core, webhooks)."""
    api_version: str = obj["apiVersion"]
    kind: str = obj["kind"]
    meta = obj["metadata"]
    plural = _CORE_PLURALS.get(kind) or kind.lower() + "s"
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = meta.get("namespace")
    scoped = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{scoped}/{plural}/{meta['name']}"


async def _poll(
    url: str,
    ssl_ctx: ssl.SSLContext | None,
    token: str | None,
    timeout: float,
    check_alive: Any,
    what: str,
) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + timeout
    last = ""
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            check_alive()
            with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                async with session.get(
                    url, headers=headers, ssl=ssl_ctx if ssl_ctx else False,
                    timeout=aiohttp.ClientTimeout(total=2),
                ) as resp:
                    last = f"{resp.status} {(await resp.text())[:300]}"
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{what} not ready at {url} after {timeout}s: {last}")


def write_token_kubeconfig(path: Path, server: str, ca_file: Path, user: str, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


"""Run a command in a network namespace of its own that still reaches the host's
loopback ports it is given and the host's DNS, for programs that bind fixed ports
(Shipwright's integration suite listens on :30443 on every interface, so two runs on
one machine collide).

`Gateway(folder, ports)` (host side, `async with`) serves a Unix socket in `folder` for
each TCP port (each connection is forwarded to the host's 127.0.0.1:port) and one for
DNS (each query, framed as DNS over TCP frames it, is sent by UDP to the host's first
nameserver in /etc/resolv.conf, and the answer sent back). `Gateway.command(argv)`
runs `python -m devtools.cluster.netns` under `unshare --net --mount`: it brings the
namespace's loopback up, listens on 127.0.0.1:port there for each port and on UDP
127.0.0.1:53, bind-mounts a resolv.conf naming 127.0.0.1 over /etc/resolv.conf (in its
own mount namespace: the host's is untouched), then runs argv and exits with its status
(SIGTERM and SIGINT are passed on; argv is killed if this process dies). Unix sockets
live in the file system, which the namespaces share. So a kubeconfig naming
https://127.0.0.1:P works unchanged inside (TLS passes through untouched), and names
resolve as on the host; nothing else of the
host's network is reachable, and nothing bound inside is visible outside.

The real node's network namespace (devtools.node.realnode) is served the same way, by
two processes of this module: `--gateway` on the host (the Gateway, until SIGTERM) and,
in the node's namespace, the inside without a command, which also listens on every
address there (`--listen 0.0.0.0`: the pods reach the API server at the node's address),
adds the node's address to its loopback (`--address`), and serves the other direction
(`--reverse PORT`: the host's 127.0.0.1:PORT reaches 127.0.0.1:PORT inside, the
kubelet's port, which the API server calls for pods' logs and exec).

`serve_into(netns, port)` is a third way, for a program run in such a namespace by
`nsenter --net` (the node's Prometheus, devtools.dashboard.prometheus): a server on a free
port of the host's 127.0.0.1 whose every connection goes to 127.0.0.1:port in the
namespace `netns` (a /proc/PID/ns/net), on a socket a thread of this process makes there
(setns(2) in and back out), with no process or IP route of its own.

Needs CAP_SYS_ADMIN for `unshare` (root here); `available()` says whether it works.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from devtools.cluster.processes import die_with_parent

CHUNK = 65536
# Seconds a DNS query may take on the host's nameserver (glibc's own default is 5).
DNS_TIMEOUT = 5.0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _splice(client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                  upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    try:
        await asyncio.gather(_pipe(client[0], upstream[1]), _pipe(upstream[0], client[1]))
    finally:
        for _, w in (client, upstream):
            w.close()


async def _framed_query(r: asyncio.StreamReader) -> bytes:
    size = struct.unpack("!H", await r.readexactly(2))[0]
    return await r.readexactly(size)


class _OneAnswer(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if not self.answer.done():
            self.answer.set_result(data)


def host_nameserver(resolv_conf: Path = Path("/etc/resolv.conf")) -> str:
    for line in resolv_conf.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            return fields[1]
    return "127.0.0.1"


def tcp_socket(folder: Path, port: int) -> Path:
    """Where the host's 127.0.0.1:port is served to the namespace."""
    return folder / f"tcp-{port}.sock"


def reverse_socket(folder: Path, port: int) -> Path:
    """Where the namespace's 127.0.0.1:port is served to the host (`--reverse`)."""
    return folder / f"rtcp-{port}.sock"


async def _to_unix(path: Path, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        upstream = await asyncio.open_unix_connection(str(path))
    except OSError:
        w.close()
        return
    await _splice((r, w), upstream)


async def _to_tcp(port: int, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        upstream = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        w.close()
        return
    await _splice((r, w), upstream)


_CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def _connect_in(netns: Path, port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:port in network namespace `netns`, made by the
    calling thread (setns(2) moves only it) from inside, which then returns to its own
    namespace: the socket stays in the one it was made in."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)
    sock.setblocking(False)
    return sock


async def _into(netns: Path, port: int, r: asyncio.StreamReader,
                w: asyncio.StreamWriter) -> None:
    try:
        sock = await asyncio.to_thread(_connect_in, netns, port)
        upstream = await asyncio.open_connection(sock=sock)
    except OSError:
        w.close()
        return
    await _splice((r, w), upstream)


async def serve_into(netns: Path, port: int) -> asyncio.Server:
    """A server on a free port of the host's 127.0.0.1 (its `sockets[0]`) forwarding each
    connection to 127.0.0.1:port in network namespace `netns`; `close()` it to stop."""
    return await asyncio.start_server(functools.partial(_into, netns, port), "127.0.0.1", 0)


class Gateway:
    """The host's side of the namespace `command` starts: Unix sockets in `folder`
    forwarding to the host's 127.0.0.1:port for each of `ports`, and to its DNS; and for
    each of `reverse`, the host's 127.0.0.1:port forwarded to the namespace's."""

    def __init__(self, folder: Path, ports: list[int], reverse: list[int] | None = None
                 ) -> None:
        self.folder, self.ports, self.reverse = folder, ports, reverse or []
        self.nameserver = host_nameserver()
        self._servers: list[asyncio.Server] = []

    def tcp_socket(self, port: int) -> Path:
        return tcp_socket(self.folder, port)

    def command(self, argv: list[str]) -> list[str]:
        ports = [arg for port in self.ports for arg in ("--port", str(port))]
        return ["unshare", "--net", "--mount", sys.executable, "-m", "devtools.cluster.netns",
                "--folder", str(self.folder), *ports, "--", *argv]

    async def _dns(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            query = await _framed_query(r)
            transport, protocol = await loop.create_datagram_endpoint(
                _OneAnswer, remote_addr=(self.nameserver, 53))
            try:
                transport.sendto(query)
                answer = await asyncio.wait_for(protocol.answer, DNS_TIMEOUT)
            finally:
                transport.close()
            w.write(struct.pack("!H", len(answer)) + answer)
            await w.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass  # no answer: the resolver inside times out and says so
        finally:
            w.close()

    async def __aenter__(self) -> Gateway:
        self.folder.mkdir(parents=True, exist_ok=True)
        for port in self.ports:
            self._servers.append(await asyncio.start_unix_server(
                functools.partial(_to_tcp, port), path=str(self.tcp_socket(port))))
        for port in self.reverse:
            self._servers.append(await asyncio.start_server(
                functools.partial(_to_unix, reverse_socket(self.folder, port)),
                "127.0.0.1", port))
        self._servers.append(await asyncio.start_unix_server(
            self._dns, path=str(self.folder / "dns.sock")))
        (self.folder / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        return self

    async def __aexit__(self, *exc: object) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1)


def available() -> str | None:
    """None if `unshare --net --mount` works here, else why not (one line)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare(1) or ip(8) is not installed"
    probe = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True,
                           text=True)
    return None if probe.returncode == 0 else f"unshare: {probe.stderr.strip()}"


class _DnsRelay(asyncio.DatagramProtocol):
    """Inside: each UDP query on 127.0.0.1:53 goes to the gateway's DNS socket."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.transport: asyncio.DatagramTransport | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        task = asyncio.ensure_future(self._ask(data, addr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ask(self, query: bytes, addr: Any) -> None:
        try:
            r, w = await asyncio.open_unix_connection(str(self.socket))
            w.write(struct.pack("!H", len(query)) + query)
            await w.drain()
            answer = await asyncio.wait_for(_framed_query(r), DNS_TIMEOUT + 1)
            w.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return
        if self.transport is not None:
            self.transport.sendto(answer, addr)


async def _inside(folder: Path, ports: list[int], argv: list[str], listen: str = "127.0.0.1",
                  reverse: list[int] | None = None, ready: Path | None = None) -> int:
    """Serves the namespace's side; runs argv and returns its exit status, or without
    argv serves until SIGTERM or SIGINT (and returns 0)."""
    loop = asyncio.get_running_loop()
    servers = [await asyncio.start_server(functools.partial(_to_unix, tcp_socket(folder, port)),
                                          listen, port)
               for port in ports]
    servers += [await asyncio.start_unix_server(functools.partial(_to_tcp, port),
                                                path=str(reverse_socket(folder, port)))
                for port in reverse or []]
    dns, _ = await loop.create_datagram_endpoint(lambda: _DnsRelay(folder / "dns.sock"),
                                                 local_addr=("127.0.0.1", 53))
    if ready is not None:
        await asyncio.to_thread(ready.write_text, "serving\n")
    if argv:
        child = await asyncio.create_subprocess_exec(*argv, preexec_fn=die_with_parent)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, child.send_signal, sig)
        code = await child.wait()
    else:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        code = 0
    dns.close()
    for server in servers:
        server.close()
    return code if code >= 0 else 128 - code


async def _gateway(folder: Path, ports: list[int], reverse: list[int]) -> int:
    """The host's side as a process of its own, until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Gateway(folder, ports, reverse):
        await stop.wait()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", type=Path, required=True)
    p.add_argument("--port", type=int, action="append", default=[])
    p.add_argument("--gateway", action="store_true",
                   help="serve the host's side (the Gateway) until SIGTERM")
    p.add_argument("--reverse", type=int, action="append", default=[],
                   help="serve the namespace's 127.0.0.1:PORT to the host's")
    p.add_argument("--listen", default="127.0.0.1",
                   help="the namespace's address for --port (0.0.0.0: all of them)")
    p.add_argument("--address", action="append", default=[],
                   help="an address (CIDR) the namespace's loopback also holds")
    p.add_argument("--ready", type=Path, help="written once everything serves")
    p.add_argument("argv", nargs="*", help="(inside) the command; none: serve until SIGTERM")
    args = p.parse_args()
    if args.gateway:
        return asyncio.run(_gateway(args.folder, args.port, args.reverse))
    # A new namespace's loopback is down; its resolv.conf is the host's until replaced.
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in args.address:
        subprocess.run(["ip", "address", "add", address, "dev", "lo"], check=True)
    subprocess.run(["mount", "--bind", str(args.folder / "resolv.conf"), "/etc/resolv.conf"],
                   check=True)
    return asyncio.run(_inside(args.folder, args.port, args.argv, args.listen, args.reverse,
                               args.ready))


if __name__ == "__main__":
    sys.exit(main())

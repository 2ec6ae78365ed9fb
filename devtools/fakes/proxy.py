"""A loopback TCP proxy that misbehaves on demand, for the partition tests and the soak.

Each client connection gets its own connection to the upstream (kube-apiserver:
the TLS passes through untouched), and bytes are copied both ways. On demand:

- `stall()`: stop forwarding both ways on every connection, open or opened later,
  without closing anything: a network partition. The bytes wait in socket
  buffers and are delivered in order once `resume()` lifts it, as TCP delivers
  them when a partition heals.
- `stall_open()`: the same for the connections open now only, new ones work: a
  half-open connection (a NAT that forgot it, a peer gone without a FIN).
- `drop()`: reset every open connection.
- `response_delay`: hold every chunk from the upstream back this many seconds
  (order kept, no cascading: each chunk is due `response_delay` after it arrived).

Invariant: a request the client sent reaches the upstream and is judged there, even
if the client gave up on it. When the client closes its side, the upstream is
told only once everything the client sent was forwarded and `linger` more
seconds passed. That is the worst case for a stale write: a Go server cancels a
request whose client has gone, which would hide a write that should be refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

CHUNK = 65536


@dataclass(eq=False)
class _Conn:
    client_r: asyncio.StreamReader
    client_w: asyncio.StreamWriter
    up_r: asyncio.StreamReader
    up_w: asyncio.StreamWriter
    flowing: asyncio.Event = field(default_factory=asyncio.Event)

    def abort(self) -> None:
        for writer in (self.client_w, self.up_w):
            writer.transport.abort()


class Proxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, linger: float = 5.0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.linger = linger
        self.response_delay = 0.0
        self.bytes_up = 0  # forwarded client -> upstream
        self.bytes_down = 0  # forwarded upstream -> client
        self.accepted = 0
        self._stalled = False
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.drop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stall(self) -> None:
        self._stalled = True
        self.stall_open()

    def stall_open(self) -> None:
        for conn in self._conns:
            conn.flowing.clear()

    def resume(self) -> None:
        self._stalled = False
        for conn in self._conns:
            conn.flowing.set()

    def drop(self) -> None:
        for conn in list(self._conns):
            conn.abort()

    def open_connections(self) -> int:
        return len(self._conns)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _accept(self, client_r: asyncio.StreamReader,
                      client_w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.transport.abort()
            return
        conn = _Conn(client_r, client_w, up_r, up_w)
        if not self._stalled:
            conn.flowing.set()
        self._conns.add(conn)
        up = self._spawn(self._pump_up(conn))
        down = self._spawn(self._pump_down(conn))
        linger = self._spawn(self._linger(conn, up))
        try:
            await asyncio.gather(down, return_exceptions=True)
        finally:
            for task in (up, linger):
                task.cancel()
            conn.abort()
            self._conns.discard(conn)

    async def _pump_up(self, conn: _Conn) -> None:
        """Client to upstream; returns on the client's EOF, without passing it on."""
        while True:
            try:
                data = await conn.client_r.read(CHUNK)
            except ConnectionError:
                return
            if not data:
                return
            await conn.flowing.wait()
            conn.up_w.write(data)
            self.bytes_up += len(data)
            with contextlib.suppress(ConnectionError):
                await conn.up_w.drain()

    async def _linger(self, conn: _Conn, up: asyncio.Task[None]) -> None:
        await asyncio.gather(up, return_exceptions=True)  # all the client sent is forwarded
        await asyncio.sleep(self.linger)
        conn.up_w.transport.abort()

    async def _pump_down(self, conn: _Conn) -> None:
        """Upstream to client, each chunk `response_delay` after it arrived; ends when
        the upstream closes (or is closed after the client left)."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            while True:
                try:
                    data = await conn.up_r.read(CHUNK)
                except ConnectionError:
                    data = b""
                chunks.put_nowait((loop.time(), data))
                if not data:
                    return

        reader = self._spawn(read())
        try:
            while True:
                arrived, data = await chunks.get()
                await asyncio.sleep(max(0.0, arrived + self.response_delay - loop.time()))
                await conn.flowing.wait()
                if not data:
                    return
                if conn.client_w.is_closing():
                    continue  # the client has gone: drain the upstream's answer
                conn.client_w.write(data)
                self.bytes_down += len(data)
                with contextlib.suppress(ConnectionError):
                    await conn.client_w.drain()
        finally:
            reader.cancel()

"""devtools.cluster.netns.serve_into: a host port that reaches a server bound to the
loopback of another network namespace, which the host's own loopback does not."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.cluster import netns
from devtools.cluster.localcluster import free_port


async def test_a_connection_to_the_forwarded_port_reaches_the_namespace(tmp_path: Path) -> None:
    why = netns.available()
    if why is not None:
        pytest.skip(f"no network namespace here: {why}")
    port = free_port()
    (tmp_path / "index.html").write_text("inside\n")
    server = await asyncio.create_subprocess_exec(
        "unshare", "--net", "sh", "-c",
        f"ip link set lo up && exec {sys.executable} -m http.server --bind 127.0.0.1 {port}",
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        forward = await netns.serve_into(Path(f"/proc/{server.pid}/ns/net"), port)
        host_port = forward.sockets[0].getsockname()[1]
        said = b""
        for _ in range(100):  # until the server inside listens
            r, w = await asyncio.open_connection("127.0.0.1", host_port)
            w.write(b"GET /index.html HTTP/1.0\r\n\r\n")
            said = await r.read()
            w.close()
            if said:
                break
            await asyncio.sleep(0.1)
        assert said.startswith(b"HTTP/1.0 200") and said.endswith(b"inside\n"), said
        # Nothing listens on that port of the host's own loopback.
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        forward.close()
    finally:
        server.terminate()
        await server.wait()

"""The HTTP endpoints SREs and the kubelet probe: /metrics, /healthz, /readyz."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """':8080' -> ('0.0.0.0', 8080); '127.0.0.1:0' -> any free port; '0' -> disabled."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))


class Endpoints:
    """One aiohttp runner per bind address; metrics and probes may share one."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        self._ready = ready
        self._runners: list[web.AppRunner] = []
        self.addresses: dict[str, str] = {}

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        # Answering at all proves the event loop is not stuck.
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="informer caches not synced")

    async def start(self, metrics_address: str, probe_address: str) -> None:
        routes = {
            "metrics": [web.get("/metrics", self._metrics)],
            "probes": [web.get("/healthz", self._healthz), web.get("/readyz", self._readyz)],
        }
        binds: dict[tuple[str, int], list[str]] = {}
        for what, address in (("metrics", metrics_address), ("probes", probe_address)):
            bind = parse_bind_address(address)
            if bind is not None:
                binds.setdefault(bind, []).append(what)
        for (host, port), whats in binds.items():
            app = web.Application()
            for what in whats:
                app.add_routes(routes[what])
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, host, port)
            await site.start()
            self._runners.append(runner)
            # With port 0 the OS picks one; report the port actually bound.
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            bound = f"{host}:{sockets[0].getsockname()[1] if sockets else port}"
            for what in whats:
                self.addresses[what] = bound

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()

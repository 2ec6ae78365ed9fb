"""controller.runtime.kube.Kube against a loopback HTTP server that records each request:
the field manager a write names (controller-runtime's client.WithFieldOwner), a view's
shared connections, and the server-side apply's force."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from controller.runtime.kube import APPLY_PATCH, Kube, Resource

THINGS = Resource("example.com", "v1", "things", "Thing")


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """(its URL, the requests it saw as (method, query))."""
    seen: list[tuple[str, dict[str, str]]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, dict(request.query)))
        return web.json_response({"kind": "Thing"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_every_write_names_the_field_manager_and_no_read_does(
    server: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, seen = server
    kube = Kube(client.ApiClient(client.Configuration(host=url)), field_manager="default-one")
    view = kube.with_field_manager("shipwright-buildrun-controller")
    try:
        await view.create(THINGS, "ns", {"metadata": {"name": "a"}})
        await view.put(THINGS, "ns", "a", {"metadata": {"name": "a"}})
        await view.patch(THINGS, "ns", "a", {"spec": {}}, subresource="status")
        await view.patch(THINGS, "ns", "a", {"spec": {}}, content_type=APPLY_PATCH, force=True)
        await view.get(THINGS, "ns", "a")
        await view.delete(THINGS, "ns", "a")
        await kube.patch(THINGS, "ns", "a", {"spec": {}})
        # One that names its own keeps it.
        await view.request("POST", THINGS.path("ns"), query={"fieldManager": "mine"}, body={})
        assert view._session is kube._session  # one connection pool
    finally:
        await kube.close()
    manager = {"fieldManager": "shipwright-buildrun-controller"}
    assert seen == [
        ("POST", manager), ("PUT", manager), ("PATCH", manager),
        ("PATCH", {"force": "true", **manager}), ("GET", {}), ("DELETE", {}),
        ("PATCH", {"fieldManager": "default-one"}), ("POST", {"fieldManager": "mine"}),
    ]


async def test_without_a_field_manager_the_user_agent_names_the_writer(
    server: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, seen = server
    kube = Kube(client.ApiClient(client.Configuration(host=url)))
    try:
        await kube.create(THINGS, "ns", {"metadata": {"name": "a"}})
    finally:
        await kube.close()
    assert seen == [("POST", {})]

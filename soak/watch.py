"""A list+watch of one resource that reports every state it sees, through restarts.

Written for the soak on purpose instead of reusing controller.runtime.informers: the
soak checks the controller, so it must not share the controller's bugs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal

from controller.runtime.kube import JSON, ApiError, Kube, Resource
from devtools.cluster.polling import transient

log = logging.getLogger(__name__)

Seen = Literal["LISTED", "ADDED", "MODIFIED", "DELETED"]
OnObject = Callable[[Seen, JSON], None]
# Every object of a (re)list, after each was handed to OnObject: what was there before
# and is not now was deleted while no watch ran (a relist sends no DELETED).
OnList = Callable[[list[JSON]], None]


class _Gone(Exception):
    pass


class Follower:
    """Lists, then watches from the list's resourceVersion; after a broken stream it
    resumes from the last resourceVersion seen (so nothing is skipped), and after
    410 Gone it lists again. `on_object` gets every object state in order; `on_list`,
    if given, each whole list (deletions during a gap show only there)."""

    def __init__(self, kube: Kube, resource: Resource, namespace: str | None,
                 on_object: OnObject, on_list: OnList | None = None) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.on_object = on_object
        self.on_list = on_list
        self.rv: str | None = None
        self.lists = 0
        self.watch_errors = 0
        self.synced = asyncio.Event()

    async def run(self) -> None:
        delay = 0.05
        while True:
            try:
                if self.rv is None:
                    await self._list()
                await self._watch()
                delay = 0.05
            except _Gone:
                self.rv = None
            except Exception as exc:
                if not transient(exc):
                    raise
                self.watch_errors += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def list_all(self) -> list[JSON]:
        """Every object, page by page, each handed to on_object, then all to on_list;
        the list's resourceVersion kept to watch from."""
        query: dict[str, str | int] = {"limit": 500}
        items: list[JSON] = []
        while True:
            page = await self.kube.list(self.resource, self.namespace, **query)
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            query = {"limit": 500, "continue": token}
        self.lists += 1
        for obj in items:
            self.on_object("LISTED", obj)
        if self.on_list is not None:
            self.on_list(items)
        self.rv = page["metadata"]["resourceVersion"]
        return items

    async def _list(self) -> None:
        await self.list_all()
        self.synced.set()

    async def _watch(self) -> None:
        assert self.rv is not None
        try:
            async for event in self.kube.watch(self.resource, self.namespace, self.rv,
                                               timeout_seconds=120):
                kind = event.get("type")
                obj = event.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.on_object(kind, obj)
                if rv:
                    self.rv = rv
        except ApiError as exc:
            if exc.status == 410:
                raise _Gone from exc
            raise

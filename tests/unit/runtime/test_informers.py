"""The Informer against a scripted Kube (no server), on virtual time: watch-lists (and
their fallback, list paging, on a server that refuses them), relist after 410 Gone,
DELETED for vanished objects exactly once, noise stripped once per object, and
cancellation that really stops it."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.runtime import informers
from controller.runtime.informers import EventType, Informer
from controller.runtime.kube import JSON, ApiError, Kube, Resource, key_of
from tests.harness import metric, wait_for
from tests.virtualtime import run

BLOCK = object()  # a watch step: the stream stays open and silent until cancelled


def obj(name: str, rv: str, **extra: Any) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                         "managedFields": [{"manager": "kubectl"}]}, **extra}


class ScriptedKube:
    """`list` answers page after page from `pages`; each `watch` plays the next script
    (events, an exception to raise, or BLOCK), and each watch-list (send_initial_events)
    the next of `streams`; with none scripted, it is refused (422) as a server without
    watch-lists refuses it, and only counted in `refused`."""

    def __init__(self, pages: list[JSON], watches: list[list[Any]],
                 streams: list[list[Any]] | None = None) -> None:
        self.pages = deque(pages)
        self.watches = deque(watches)
        self.streams = deque(streams or [])
        self.refused = 0
        self.list_queries: list[dict[str, Any]] = []
        self.watched_from: list[str] = []
        self.metadata_only: list[tuple[str, bool]] = []  # (list or watch, asked for it)
        self.watch_selectors: list[str | None] = []

    async def list(self, resource: Resource, namespace: str | None, **query: Any) -> JSON:
        self.list_queries.append(query)
        self.metadata_only.append(("list", False))
        return self.pages.popleft()

    async def list_metadata(self, resource: Resource, namespace: str | None,
                            **query: Any) -> JSON:
        self.list_queries.append(query)
        self.metadata_only.append(("list", True))
        return self.pages.popleft()

    async def watch(self, resource: Resource, namespace: str | None, resource_version: str,
                    *, timeout_seconds: int, metadata_only: bool = False,
                    label_selector: str | None = None,
                    send_initial_events: bool = False) -> AsyncIterator[JSON]:
        if send_initial_events and not self.streams:
            self.refused += 1
            raise ApiError(422, "Invalid", "sendInitialEvents: Forbidden: sendInitialEvents "
                           "is forbidden for watch unless the WatchList feature gate is enabled")
        self.watched_from.append(resource_version)
        self.watch_selectors.append(label_selector)
        self.metadata_only.append(("watch-list" if send_initial_events else "watch",
                                   metadata_only))
        for step in (self.streams if send_initial_events else self.watches).popleft():
            if step is BLOCK:
                await asyncio.Event().wait()
            if isinstance(step, BaseException):
                raise step
            yield step


def page(items: list[JSON], rv: str, token: str = "") -> JSON:
    return {"items": items, "metadata": {"resourceVersion": rv, "continue": token}}


def gone() -> ApiError:
    return ApiError(410, "Expired", "too old resource version")


def resource() -> Resource:
    # A plural of its own per test, so the informer_* counters start at zero.
    return Resource("example.com", "v1", f"things{uuid.uuid4().hex[:8]}", "Thing")


Event = tuple[EventType, str, str | None]


def recording(informer: Informer) -> list[Event]:
    events: list[Event] = []

    def handler(kind: EventType, new: JSON, old: JSON | None, _: bool) -> None:
        events.append((kind, key_of(new), old["metadata"]["resourceVersion"] if old else None))

    informer.add_handler(handler)
    return events


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    async with asyncio.timeout(5):
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()


def test_cancel_stops_run_even_inside_its_retry_loop() -> None:
    # The retry loop catches BaseException; a cancellation must still end it.
    async def main() -> None:
        kube = ScriptedKube([page([], "1")], [[BLOCK]])
        informer = Informer(kube, resource())  # type: ignore[arg-type]
        task = asyncio.create_task(informer.run())
        await informer.wait_synced()
        await stop(task)

    run(main())


def test_relist_after_410_emits_each_vanished_object_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stripped: list[str] = []
    strip = informers.strip_noise

    def counting_strip(o: JSON, *, frozen: bool = False, last_applied: bool = False) -> JSON:
        stripped.append(o["metadata"]["name"])
        return strip(o, frozen=frozen, last_applied=last_applied)

    monkeypatch.setattr(informers, "strip_noise", counting_strip)

    async def main() -> None:
        res = resource()
        kube = ScriptedKube(
            pages=[
                page([obj("a", "1"), obj("b", "2")], "5", token="next"),
                page([obj("c", "3")], "5"),
                # after the first 410: b is gone, c changed, a as the watch left it
                page([obj("a", "6"), obj("c", "7")], "9"),
                # after the second 410: nothing changed
                page([obj("a", "6"), obj("c", "7")], "12"),
            ],
            watches=[
                [{"type": "MODIFIED", "object": obj("a", "6")}, gone()],
                [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}},
                 gone()],
                [BLOCK],
            ],
        )
        informer = Informer(kube, res, page_size=2)  # type: ignore[arg-type]
        events = recording(informer)
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(kube.watched_from) == 3)
        await stop(task)

        assert events == [
            ("ADDED", "ns/a", None), ("ADDED", "ns/b", None), ("ADDED", "ns/c", None),
            ("MODIFIED", "ns/a", "1"),
            ("MODIFIED", "ns/c", "3"), ("DELETED", "ns/b", "2"),
        ]
        assert kube.list_queries[:2] == [{"limit": 2}, {"limit": 2, "continue": "next"}]
        assert kube.watched_from == ["5", "9", "12"]
        assert sorted(informer.store.keys()) == ["ns/a", "ns/c"]
        assert all("managedFields" not in o["metadata"] for o in informer.store.values())
        assert all(o["kind"] == "Thing" for o in informer.store.values())
        assert metric("informer_relists_total", resource=res.plural) == 3
        assert metric("informer_watch_restarts_total", resource=res.plural, cause="gone") == 2

    run(main())
    # Each listed or watched object stripped once: 3 listed, 1 watched, 2 + 2 relisted.
    assert sorted(stripped) == sorted(["a", "b", "c", "a", "a", "c", "a", "c"])


def test_only_the_first_lists_objects_are_in_the_initial_list() -> None:
    """client-go's isInInitialList: the ADDED events of the first list, never a watched
    creation nor what a relist after 410 Gone adds."""
    async def main() -> None:
        kube = ScriptedKube(
            pages=[page([obj("a", "1"), obj("b", "2")], "5"),
                   page([obj("a", "1"), obj("c", "7"), obj("d", "8")], "9")],
            watches=[[{"type": "ADDED", "object": obj("c", "6")}, gone()], [BLOCK]],
        )
        informer = Informer(kube, resource())  # type: ignore[arg-type]
        seen: list[tuple[EventType, str, bool]] = []
        informer.add_handler(lambda kind, new, old, initial: seen.append(
            (kind, new["metadata"]["name"], initial)))
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(kube.watched_from) == 2)
        await stop(task)
        assert seen == [("ADDED", "a", True), ("ADDED", "b", True), ("ADDED", "c", False),
                        ("MODIFIED", "c", False), ("ADDED", "d", False),
                        ("DELETED", "b", False)]

    run(main())


def test_a_label_selector_narrows_every_list_and_watch() -> None:
    async def main() -> None:
        kube = ScriptedKube([page([obj("a", "1")], "5", token="more"), page([], "5"),
                             page([], "9")], [[gone()], [BLOCK]])
        factory = informers.InformerFactory(kube, "ns", None)  # type: ignore[arg-type]
        res = resource()
        informer = factory.informer(res, label_selector="owner.example.com/name")
        assert factory.informer(res, label_selector="owner.example.com/name") is informer
        with pytest.raises(ValueError, match=r"selects owner\.example\.com/name"):
            factory.informer(res)
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(kube.watch_selectors) == 2)
        await stop(task)
        assert kube.list_queries == [
            {"limit": 500, "labelSelector": "owner.example.com/name"},
            {"limit": 500, "labelSelector": "owner.example.com/name", "continue": "more"},
            {"limit": 500, "labelSelector": "owner.example.com/name"}]
        assert kube.watch_selectors == ["owner.example.com/name"] * 2
        plain = factory.informer(resource())
        with pytest.raises(ValueError, match="selects everything"):
            factory.informer(plain.resource, label_selector="x")

    run(main())


def test_a_retryable_watch_error_resumes_from_the_last_version_without_a_relist() -> None:
    async def main() -> None:
        res = resource()
        kube = ScriptedKube(
            pages=[page([obj("a", "1")], "5")],
            watches=[
                [{"type": "MODIFIED", "object": obj("a", "6")},
                 ApiError(500, "InternalError", "etcd leader changed")],
                [OSError("connection reset")],
                [BLOCK],
            ],
        )
        informer = Informer(kube, res)  # type: ignore[arg-type]
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(kube.watched_from) == 3)
        await stop(task)
        assert kube.watched_from == ["5", "6", "6"]
        assert len(kube.list_queries) == 1
        assert metric("informer_watch_restarts_total", resource=res.plural, cause="error") == 2

    run(main())


def test_a_handler_that_raises_does_not_stop_the_cache() -> None:
    async def main() -> None:
        kube = ScriptedKube([page([obj("a", "1"), obj("b", "2")], "5")], [[BLOCK]])
        informer = Informer(kube, resource())  # type: ignore[arg-type]

        def broken(kind: EventType, new: JSON, old: JSON | None, initial: bool) -> None:
            raise KeyError("bug")

        informer.add_handler(broken)
        events = recording(informer)
        task = asyncio.create_task(informer.run())
        await informer.wait_synced()
        await stop(task)
        assert [key for _, key, _ in events] == ["ns/a", "ns/b"]
        assert len(informer.store) == 2

    run(main())


def test_scripted_kube_matches_the_real_signatures() -> None:
    # The fake stands in for these two methods only; keep their shapes the same.
    import inspect

    for name in ("list", "watch"):
        real = inspect.signature(getattr(Kube, name))
        fake = inspect.signature(getattr(ScriptedKube, name))
        assert list(real.parameters) == list(fake.parameters), name


def test_the_transform_shapes_every_listed_and_watched_object_before_anyone_sees_it(
) -> None:
    transformed: list[str] = []

    def drop_spec(o: JSON) -> JSON:
        transformed.append(o["metadata"]["name"])
        o.pop("spec", None)
        return o

    async def main() -> None:
        kube = ScriptedKube(
            pages=[page([obj("a", "1", spec={"big": "x" * 100}), obj("b", "2")], "5")],
            watches=[[{"type": "MODIFIED", "object": obj("a", "6", spec={"big": "y"})},
                      {"type": "ADDED", "object": obj("c", "7", spec={"big": "z"})},
                      {"type": "DELETED", "object": obj("b", "8", spec={"big": "w"})},
                      BLOCK]],
        )
        informer = Informer(kube, resource(), transform=drop_spec)  # type: ignore[arg-type]
        seen: list[JSON] = []
        informer.add_handler(
            lambda kind, new, old, _: seen.extend([new] + ([old] if old else [])))
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(transformed) == 5)
        await stop(task)
        assert sorted(informer.store.keys()) == ["ns/a", "ns/c"]
        assert seen and all("spec" not in o for o in seen)
        assert all("spec" not in o and "managedFields" not in o["metadata"]
                   for o in informer.store.values())

    run(main())
    assert transformed == ["a", "b", "a", "c", "b"]  # once per object received


def test_the_factory_makes_one_informer_per_resource_for_every_controller() -> None:
    kube: Any = object()  # nothing runs: the factory only builds informers
    factory = informers.InformerFactory(kube, "ns", 30.0)
    things, clusters = resource(), Resource("example.com", "v1", "clusters", "C",
                                            namespaced=False)

    def label(o: JSON) -> list[str]:
        return [o["metadata"].get("labels", {}).get("app", "")]

    def slim(o: JSON) -> JSON:
        return o

    first = factory.informer(things, transform=slim)
    second = factory.informer(things, indexers={"app": label})  # another controller
    assert first is second and factory.get(things) is first
    assert set(first.store.indexers) == {"app"} and first.transform is slim
    assert (first.namespace, factory.informer(clusters).namespace) == ("ns", None)
    assert factory.all() == (first, factory.get(clusters))
    with pytest.raises(ValueError, match="has another transform"):
        factory.informer(things, transform=lambda o: o)


def test_a_metadata_only_informer_lists_and_watches_metadata_only() -> None:
    # What the server sends for it (PartialObjectMetadata) is checked against the real
    # API server in tests/cluster/test_build_controller.py; here, that every list and
    # watch, the relist after a 410 too, asks for it, and the factory keeps one mode.
    async def main() -> None:
        # The API server answers an empty PartialObjectMetadataList with "items": null.
        empty = {"items": None, "metadata": {"resourceVersion": "2"}}
        kube = ScriptedKube([page([obj("a", "1")], "1"), empty], [[gone()], [BLOCK]])
        factory = informers.InformerFactory(kube, "ns", None)  # type: ignore[arg-type]
        res = resource()
        informer = factory.informer(res, metadata_only=True)
        assert factory.informer(res, metadata_only=True) is informer
        with pytest.raises(ValueError, match="is metadata-only"):
            factory.informer(res)
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(kube.metadata_only) == 4)
        await stop(task)
        assert kube.metadata_only == [("list", True), ("watch", True), ("list", True),
                                      ("watch", True)]
        assert informer.store.keys() == []  # "a" is gone after the (empty) relist
        plain = factory.informer(resource())
        assert not plain.metadata_only
        with pytest.raises(ValueError, match="is not metadata-only"):
            factory.informer(plain.resource, metadata_only=True)

    run(main())


def test_a_frozen_object_is_stored_as_bytes_and_its_strings_not_interned() -> None:
    """The owner's freeze rule (Store): a frozen object's unique strings are not
    interned (they are not kept: interning only grew the interpreter's table)."""
    async def main() -> None:
        done = obj("done", "1", status={"phase": "finished-" + uuid.uuid4().hex})
        live = obj("live", "2", status={"phase": "running-" + uuid.uuid4().hex})
        kube = ScriptedKube([page([done, live], "5")], [[BLOCK]])
        informer = Informer(kube, resource(),  # type: ignore[arg-type]
                            freeze=lambda o: o["status"]["phase"].startswith("finished"))
        seen: list[JSON] = []
        informer.add_handler(lambda kind, new, old, initial: seen.append(new))
        task = asyncio.create_task(informer.run())
        await informer.wait_synced()
        await stop(task)
        assert isinstance(informer.store._objects["ns/done"], bytes)
        assert informer.store.get("ns/done") == seen[0]  # handlers got the object itself
        assert isinstance(informer.store._objects["ns/live"], dict)
        done_phase, live_phase = seen[0]["status"]["phase"], seen[1]["status"]["phase"]
        # An equal string made anew interns to the cached one only if that was interned.
        assert sys.intern("".join(list(live_phase))) is live_phase
        assert sys.intern("".join(list(done_phase))) is not done_phase

    run(main())


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def test_an_updated_informer_keeps_last_applied_until_frozen_and_others_never() -> None:
    """An object its owner updates whole keeps kubectl's last-applied annotation (the
    update must carry it back, or the field manager drops kubectl's claim to it), until
    frozen (never written again); every other informer drops it (a Secret's holds its
    data)."""
    def applied(name: str, rv: str, phase: str) -> JSON:
        o = obj(name, rv, status={"phase": phase})
        o["metadata"]["annotations"] = {LAST_APPLIED: '{"kind":"X"}', "keep": "me"}
        return o

    async def main() -> None:
        pages = [page([applied("done", "1", "finished"), applied("live", "2", "running")],
                      "5") for _ in range(2)]  # one for each informer: they strip in place
        kube = ScriptedKube(pages, [[BLOCK], [BLOCK]])
        factory = informers.InformerFactory(kube, "ns", None)  # type: ignore[arg-type]
        things = resource()
        first = factory.informer(things)  # another controller asks first, unsaid
        updated = factory.informer(
            things, updated=True, freeze=lambda o: o["status"]["phase"] == "finished")
        assert updated is first and first.updated
        plain = Informer(kube, things)  # type: ignore[arg-type]
        for informer in (updated, plain):
            task = asyncio.create_task(informer.run())
            await informer.wait_synced()
            await stop(task)
        def annotations(informer: Informer, key: str) -> JSON:
            cached = informer.store.get(key)
            assert cached is not None
            return dict(cached["metadata"]["annotations"])

        kept = {LAST_APPLIED: '{"kind":"X"}', "keep": "me"}
        assert annotations(updated, "ns/live") == kept
        assert annotations(updated, "ns/done") == {"keep": "me"}
        assert annotations(plain, "ns/live") == annotations(plain, "ns/done") == {"keep": "me"}
        other = factory.informer(Resource("example.com", "v1", "others", "O"))
        other.store.upsert(obj("x", "1"))  # it ran, stripping without `updated`
        with pytest.raises(ValueError, match="has run without `updated`"):
            factory.informer(other.resource, updated=True)

    run(main())


def initial_events_end(rv: str) -> JSON:
    return {"type": "BOOKMARK", "object": {"metadata": {
        "resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}}}}


def test_a_watch_list_is_the_list_then_the_watch_in_one_stream() -> None:
    """Where the server streams lists (KEP 3157), no page is asked for: the stream's
    events up to INITIAL_EVENTS_END are the list (the first one's ADDED are `initial`,
    a change in between counts as listed), and the same stream goes on as the watch.
    After a 410, the relist is a watch-list again, and what it did not bring is
    DELETED once."""
    async def main() -> None:
        res = resource()
        kube = ScriptedKube(pages=[], watches=[], streams=[
            [{"type": "ADDED", "object": obj("a", "1")},
             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}},
             {"type": "ADDED", "object": obj("b", "2")},
             {"type": "MODIFIED", "object": obj("a", "4")},  # after the snapshot
             initial_events_end("5"),
             {"type": "ADDED", "object": obj("c", "6")},
             gone()],
            [{"type": "ADDED", "object": obj("a", "4")},
             {"type": "ADDED", "object": obj("c", "7")},
             initial_events_end("9"),
             BLOCK]])
        informer = Informer(kube, res)  # type: ignore[arg-type]
        seen: list[tuple[EventType, str, bool]] = []
        informer.add_handler(lambda kind, new, old, initial: seen.append(
            (kind, new["metadata"]["name"], initial)))
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(kube.watched_from) == 2 and informer._rv == "9")
        await stop(task)
        assert seen == [("ADDED", "a", True), ("ADDED", "b", True), ("MODIFIED", "a", False),
                        ("ADDED", "c", False),  # watched, after the end
                        ("MODIFIED", "c", False), ("DELETED", "b", False)]
        assert kube.watched_from == ["", ""]  # the latest, both times
        assert kube.list_queries == [] and kube.refused == 0
        assert sorted(informer.store.keys()) == ["ns/a", "ns/c"]
        assert metric("informer_relists_total", resource=res.plural) == 2
        # The list's events are not watch events; the one after the end is.
        assert metric("informer_events_total", resource=res.plural, type="ADDED") == 1

    run(main())


def test_a_watch_list_cut_before_its_end_starts_over_and_syncs_only_at_the_end() -> None:
    async def main() -> None:
        kube = ScriptedKube(pages=[], watches=[], streams=[
            [{"type": "ADDED", "object": obj("a", "1")}, OSError("connection reset")],
            [{"type": "ADDED", "object": obj("a", "1")},
             {"type": "ADDED", "object": obj("b", "2")}],  # the server's timeout
            [{"type": "ADDED", "object": obj("a", "1")},
             {"type": "ADDED", "object": obj("b", "2")}, initial_events_end("3"), BLOCK]])
        res = resource()
        informer = Informer(kube, res)  # type: ignore[arg-type]
        events = recording(informer)
        task = asyncio.create_task(informer.run())
        await informer.wait_synced()
        await stop(task)
        assert kube.watched_from == ["", "", ""]  # never resumed from a list's middle
        assert events == [("ADDED", "ns/a", None), ("ADDED", "ns/b", None)]  # once each
        assert informer._rv == "3"
        assert metric("informer_relists_total", resource=res.plural) == 1  # at the end only

    run(main())


def test_a_refused_watch_list_falls_back_to_pages_for_good() -> None:
    """A server without watch-lists (WatchList off, or older than 1.27) refuses one
    (422); the informer lists in pages from then on, its relists too. A retryable
    error is not a refusal: the watch-list is tried again."""
    async def main() -> None:
        kube = ScriptedKube(
            pages=[page([obj("a", "1")], "5"), page([obj("a", "1")], "8")],
            watches=[[gone()], [BLOCK]])
        informer = Informer(kube, resource())  # type: ignore[arg-type]
        task = asyncio.create_task(informer.run())
        await wait_for(lambda: len(kube.watched_from) == 2)
        await stop(task)
        assert kube.refused == 1 and not informer.stream_lists
        assert kube.watched_from == ["5", "8"] and len(kube.list_queries) == 2

        flaky = ScriptedKube(pages=[], watches=[], streams=[
            [ApiError(503, "ServiceUnavailable", "etcd leader changed")],
            [initial_events_end("2"), BLOCK]])
        informer = Informer(flaky, resource())  # type: ignore[arg-type]
        task = asyncio.create_task(informer.run())
        await informer.wait_synced()
        await stop(task)
        assert informer.stream_lists and flaky.list_queries == []

    run(main())

"""List-then-watch informers that keep a Store equal to the server's state.

One Informer per resource. It lists, then watches from the list's resourceVersion
with bookmarks, resuming from the last version seen after a dropped connection so no
event is lost, and relisting from scratch when the server answers 410 Gone (the
version was compacted away). A list is a watch-list where the server streams one (the
objects as ADDED events, then the watch, in one request), else pages. Handlers
get (event type, new object, old object, initial) and run inline with the watch stream,
so a handler must be quick and must not wait (no API call, no sleep): it maps the event
to the keys it concerns and enqueues them, now or after a delay it works out from the
caches, and it may record what only the event carries, such as a deleted object's last
state, for the reconcile that reads it later (the BuildRun controller's handlers, in
controller/buildrun/setup.py, do all three). `initial` is client-go's isInInitialList
(OnAdd): True for the ADDED events of an informer's first list, False for every later
event, a relist's included; with an unchanged resourceVersion (a resync) it tells a
controller which events need no haste (`controller.runtime.controller.event_priority`).

One object never stops the others. An object the informer cannot prepare for its cache
(its owner's transform or freeze rule, an index, the packing raise on it) is
quarantined: logged once with the error, counted (`informer_quarantines_total`,
`informer_quarantined_objects`), and held out of the cache, which keeps the last version
of it that it could prepare; the stream goes on past it, and the next version that can
be prepared is taken as any other. Before this, such an object failed the watch, which
resumed from before it and failed on it again, for ever: a TaskRun whose
status.conditions was a string stopped every BuildRun of the namespace (issue 39).
A handler that raises is logged and counted (`informer_handler_failures_total`) and the
others still run.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import Counter, Gauge
from tenacity import AsyncRetrying, retry_if_exception, wait_exponential_jitter

from controller.runtime.errors import is_gone, is_retryable
from controller.runtime.kube import INITIAL_EVENTS_END, JSON, ApiError, Kube, Resource, key_of
from controller.runtime.store import Freeze, Indexer, Store

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
# (event type, new object, old object, from the informer's first list)
Handler = Callable[[EventType, JSON, JSON | None, bool], None]
# Drops, in place, what no reader of one informer's cache reads (its owner knows which);
# runs on every listed and watched object before strip_noise, so handlers and the Store
# only ever see the transformed object.
Transform = Callable[[JSON], JSON]

RELISTS = Counter(
    "informer_relists_total", "Full lists, including the first one per informer", ["resource"]
)
WATCH_RESTARTS = Counter(
    "informer_watch_restarts_total",
    "Watches reopened after the server closed them or the connection failed",
    ["resource", "cause"],
)
EVENTS = Counter("informer_events_total", "Watch events received", ["resource", "type"])
QUARANTINES = Counter(
    "informer_quarantines_total",
    "Objects held out of the informer's cache because they could not be prepared for it",
    ["resource"],
)
QUARANTINED = Gauge(
    "informer_quarantined_objects",
    "Objects held out of the informer's cache now (their last version it could prepare, "
    "if any, is what the cache holds)",
    ["resource"],
)
HANDLER_FAILURES = Counter(
    "informer_handler_failures_total", "Event handler calls that raised", ["resource"]
)


class _Gone(Exception):
    """The resourceVersion we hold was compacted away: only a relist helps."""


class _Refused(Exception):
    """The API server refused a watch-list: list in pages instead."""


@dataclass
class _Listing:
    """One list under way, paged or streamed: the keys it brought so far, and whether
    it is the informer's first (its ADDED events are `initial`)."""

    initial: bool
    seen: set[str] = field(default_factory=set)


def strip_noise(obj: JSON, *, frozen: bool = False, last_applied: bool = False) -> JSON:
    """Drops what the controller never reads and costs memory per cached object, and
    shares equal strings between cached objects.

    - managedFields: a status update takes them from the object the API server holds,
      whatever the request carries.
    - kubectl's last-applied annotation (a copy of the object as applied; a Secret's holds
      its data), unless `last_applied` says to keep it: an object the controller updates
      whole must carry it back, since the API server's field manager takes an annotation
      missing from an update as removed from kubectl's claim in managedFields.
    - strings are interned unless `frozen`: the store keeps a frozen object as bytes, not
      its strings, and interning them only grew the interpreter's table of interned
      strings, by 190 bytes per finished BuildRun."""
    meta = obj["metadata"]
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and not last_applied:
        annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj if frozen else intern_strings(obj)


def identity_only(obj: JSON) -> JSON:
    """A transform for an informer whose objects nobody reads, only their comings and
    goings: keeps what the Store and a key-mapping handler need (name, namespace,
    resourceVersion; the Store keys on the first two, a relist compares the last)."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion")
                         if k in meta}}


_INTERN_MAX = 256


def intern_strings(obj: JSON) -> JSON:
    """Replaces each string value (up to _INTERN_MAX characters) with the interned equal
    string, in place. orjson shares dict keys but makes a new str for every value, so
    each cached object held its own copy of the namespace, kind, apiVersion, condition
    reasons and messages, timestamps, ...: a fifth of a finished BuildRun's memory.
    Iterative, so no nesting depth can exhaust the recursion limit."""
    stack: list[Any] = [obj]
    while stack:
        node = stack.pop()
        pairs = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in pairs:
            if type(v) is str:
                if len(v) <= _INTERN_MAX:
                    node[k] = sys.intern(v)
            elif isinstance(v, (dict, list)):
                stack.append(v)
    return obj


class Informer:
    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str | None = None,
        *,
        indexers: dict[str, Indexer] | None = None,
        resync_period: float | None = None,
        page_size: int = 500,
        stream_lists: bool = True,
        watch_timeout: int = 300,
        transform: Transform | None = None,
        metadata_only: bool = False,
        label_selector: str | None = None,
        freeze: Freeze | None = None,
        updated: bool = False,
    ) -> None:
        self.kube = kube
        self.transform = transform
        # controller-runtime's cache.ByObject Label: lists and watches only the objects it
        # selects, so the others never reach the process (nor its cache, nor a handler).
        self.label_selector = label_selector
        # controller-runtime's builder.OnlyMetadata: list and watch PartialObjectMetadata
        # (Kube.list_metadata, Kube.watch), so the cache holds each object's metadata
        # and nothing else.
        self.metadata_only = metadata_only
        self.resource = resource
        self.namespace = namespace
        # Which cached objects are kept packed (Store): the owner's rule.
        self.store = Store(indexers, freeze)
        # The owner updates these objects whole (a status update): one not frozen keeps
        # what the update must carry back (strip_noise's `last_applied`). A frozen one is
        # never written, so it is dropped there.
        self.updated = updated
        self._handlers: list[Handler] = []
        self._resync_period = resync_period
        self._page_size = page_size
        # Lists come as a watch-list (KEP 3157, as client-go's informers list since
        # 1.35): one stream of the objects, then the changes; linear in the objects,
        # where each page from the watch cache scans every object after its start.
        # 80,000 BuildRuns (bench.e2e.lists, 2026-12-07): synced in 7.8-9.5 s against
        # 22.5-34.0 in pages of 500, our CPU 5.4-5.7 s against 10.4-12.1, the API
        # server's allocations 1,953-2,052 MiB against 2,509-10,117. False once the
        # server refused one: pages.
        self.stream_lists = stream_lists
        # Seconds the server keeps one watch open (each watch picks 1-2x this). Also
        # bounds how long a silent watch goes unnoticed: see Kube.watch.
        self.watch_timeout = watch_timeout
        self._rv: str | None = None
        self._synced = asyncio.Event()
        # informer_events_total's child per event type, looked up once (labels() per
        # event was about 1% of a busy controller's time).
        self._event_counters: dict[object, Any] = {}
        # Key -> the error that holds it out of the cache (`_quarantine`). "" is the key
        # of objects whose key could not be read at all.
        self._quarantined: dict[str, str] = {}
        self._quarantined_gauge = QUARANTINED.labels(resource.plural)
        self._quarantined_gauge.set(0)

    @property
    def quarantined(self) -> dict[str, str]:
        """The keys held out of the cache now, with the error that put each there."""
        return dict(self._quarantined)

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def _emit(self, kind: EventType, obj: JSON, old: JSON | None,
              initial: bool = False) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj, old, initial)
            except Exception:
                # A handler bug must not stop the cache from following the server.
                HANDLER_FAILURES.labels(self.resource.plural).inc()
                log.exception("event handler failed", extra={"resource": self.resource.plural})

    async def run(self) -> None:
        """Runs until cancelled; connection failures back off and resume."""
        resync = (
            asyncio.create_task(self._resync_loop(self._resync_period))
            if self._resync_period
            else None
        )
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(is_retryable),
                wait=wait_exponential_jitter(multiplier=0.2, max=30),
                before_sleep=self._log_retry,
            ):
                with attempt:
                    await self._list_and_watch()
        finally:
            if resync:
                resync.cancel()

    def _log_retry(self, state: object) -> None:
        outcome = getattr(state, "outcome", None)
        exc = outcome.exception() if outcome is not None else None
        WATCH_RESTARTS.labels(self.resource.plural, "error").inc()
        log.warning("watch failed, reconnecting",
                    extra={"resource": self.resource.plural, "error": str(exc)})

    async def _list_and_watch(self) -> None:
        while True:
            try:
                if self._rv is None and self.stream_lists:
                    await self._watch(listing=_Listing(initial=not self._synced.is_set()))
                else:
                    if self._rv is None:
                        await self._list()
                    await self._watch()
                WATCH_RESTARTS.labels(self.resource.plural, "closed").inc()
            except _Gone:
                log.info("resourceVersion expired, relisting",
                         extra={"resource": self.resource.plural})
                WATCH_RESTARTS.labels(self.resource.plural, "gone").inc()
                self._rv = None
            except _Refused as exc:
                log.info("the API server does not stream lists (watch-list): listing in "
                         "pages", extra={"resource": self.resource.plural,
                                         "error": str(exc.__cause__)})
                self.stream_lists = False

    async def _list(self) -> None:
        """Lists every page (one consistent snapshot: each continue reads at the first
        page's resourceVersion) and applies each to the store as it comes: only one page
        of decoded objects is alive at a time. (Held until the last page, then stored
        frozen, the freed dicts of 20,000 finished BuildRuns and TaskRuns left 9.2 KiB of
        RSS per pair behind; applied page by page, 5.2 KiB.) The way a server that does
        not stream lists (`stream_lists`) is read."""
        listing = _Listing(initial=not self._synced.is_set())
        query: dict[str, str | int] = {"limit": self._page_size}
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        lister = self.kube.list_metadata if self.metadata_only else self.kube.list
        while True:
            page = await lister(self.resource, self.namespace, **query)
            # An empty PartialObjectMetadataList (metadata_only) has "items": null.
            for obj in page.get("items") or []:
                self._listed(obj, listing)
            token = page.get("metadata", {}).get("continue")
            if not token:
                break
            query = {**query, "continue": token}
        self._listed_all(listing, page["metadata"]["resourceVersion"])

    def _listed_all(self, listing: _Listing, rv: str) -> None:
        """The end of a list (its last page, or a watch-list's INITIAL_EVENTS_END
        bookmark): what the store holds and the list did not is deleted; then the
        informer is synced at `rv`."""
        RELISTS.labels(self.resource.plural).inc()
        for key in set(self._quarantined) - listing.seen:
            self._release(key, "gone")
        for key in set(self.store.keys()) - listing.seen:
            gone = self.store.remove(key)
            assert gone is not None
            self._emit("DELETED", gone, gone)
        self._rv = rv
        self._synced.set()

    def _prepare(self, obj: JSON) -> JSON:
        """What the cache keeps of a listed or watched object. List items carry no kind;
        handlers and the cache want whole objects."""
        if self.transform is not None:
            obj = self.transform(obj)
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        frozen = self.store.freezes(obj)
        return strip_noise(obj, frozen=frozen, last_applied=self.updated and not frozen)

    def _key(self, raw: JSON) -> str | None:
        """The cache key of a listed or watched object; None (quarantined under "") when
        it has none, which no API server sends."""
        try:
            return key_of(raw)
        except Exception as exc:
            self._quarantine("", raw, exc)
            return None

    def _admit(self, key: str, raw: JSON) -> tuple[JSON, JSON | None] | None:
        """Prepares `raw` and stores it: (the prepared object, the one it replaced), or
        None when it cannot be prepared, which quarantines it. Store.upsert changes
        nothing when it raises, so the cache keeps the version it had."""
        try:
            obj = self._prepare(raw)
            old = self.store.upsert(obj)
        except Exception as exc:
            self._quarantine(key, raw, exc)
            return None
        self._release(key, "cached")
        return obj, old

    def _quarantine(self, key: str, raw: JSON, exc: Exception) -> None:
        """Holds `key` out of the cache; logged, with the error, when it first goes in."""
        if key in self._quarantined:
            return
        self._quarantined[key] = f"{type(exc).__name__}: {exc}"
        self._quarantined_gauge.set(len(self._quarantined))
        QUARANTINES.labels(self.resource.plural).inc()
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        log.warning("cannot cache this object: held out of the cache until a version of it "
                    "can be", exc_info=exc, extra={
                        "resource": self.resource.plural, "key": key,
                        "resourceVersion": meta.get("resourceVersion")
                        if isinstance(meta, dict) else None})

    def _release(self, key: str, why: str) -> None:
        if self._quarantined.pop(key, None) is None:
            return
        self._quarantined_gauge.set(len(self._quarantined))
        log.info("object no longer held out of the cache",
                 extra={"resource": self.resource.plural, "key": key, "why": why})

    def _listed(self, raw: JSON, listing: _Listing) -> None:
        key = self._key(raw)
        if key is None:
            return
        listing.seen.add(key)
        admitted = self._admit(key, raw)
        if admitted is None:
            return
        obj, old = admitted
        if old is None:
            self._emit("ADDED", obj, None, listing.initial)
        elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
            self._emit("MODIFIED", obj, old)

    async def _watch(self, *, listing: _Listing | None = None) -> None:
        """Watches from the resourceVersion held; with `listing`, a watch-list from the
        latest version: its events are the list's until INITIAL_EVENTS_END, which ends
        the list (`_listed_all`), and the same stream goes on as a watch."""
        assert (self._rv is None) == (listing is not None)
        # Spread watch timeouts so informers do not all reconnect at once.
        timeout = max(1, int(self.watch_timeout * random.uniform(1.0, 2.0)))
        try:
            async for event in self.kube.watch(
                self.resource, self.namespace, self._rv or "", timeout_seconds=timeout,
                metadata_only=self.metadata_only, label_selector=self.label_selector,
                send_initial_events=listing is not None,
            ):
                if listing is None:
                    self._on_event(event)
                elif self._on_initial_event(event, listing):
                    listing = None
        except ApiError as exc:
            if is_gone(exc):
                raise _Gone from exc
            if listing is not None and not listing.seen and not is_retryable(exc):
                # Refused before any object came: no watch-list on this server
                # (WatchList off, or older than 1.27). client-go falls back to a list too.
                raise _Refused from exc
            raise

    def _on_initial_event(self, event: JSON, listing: _Listing) -> bool:
        """One event of a watch-list before its end: True when it was the end. Not
        counted in informer_events_total, as a page's objects are not: they are the
        list. (The server may send changes after its snapshot before the end; they
        count as listed, and a deletion among them as a deletion.)"""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "BOOKMARK":
            meta = obj.get("metadata") or {}
            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                self._listed_all(listing, meta["resourceVersion"])
                return True
        elif kind in ("ADDED", "MODIFIED"):
            self._listed(obj, listing)
        elif kind == "DELETED":
            key = self._key(obj)
            if key is not None:
                listing.seen.discard(key)
                self._deleted(key, obj)
        return False

    def _on_event(self, event: JSON) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        rv = obj.get("metadata", {}).get("resourceVersion")
        counter = self._event_counters.get(kind)
        if counter is None:
            counter = self._event_counters[kind] = EVENTS.labels(self.resource.plural, str(kind))
        counter.inc()
        if kind == "BOOKMARK":
            self._rv = rv
            return
        key = self._key(obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None
        if key is not None and kind == "DELETED":
            self._deleted(key, obj)
        elif key is not None:
            admitted = self._admit(key, obj)
            if admitted is not None:
                new, old = admitted
                self._emit("ADDED" if old is None else "MODIFIED", new, old)
        self._rv = rv

    def _deleted(self, key: str, raw: JSON) -> None:
        """A deletion needs only the key: one the informer cannot prepare is told to the
        handlers as the version the cache held, or as its metadata alone."""
        old = self.store.remove(key)
        self._release(key, "deleted")
        try:
            obj = self._prepare(raw)
        except Exception:
            obj = old or {"apiVersion": self.resource.api_version, "kind": self.resource.kind,
                          "metadata": raw["metadata"]}
        self._emit("DELETED", obj, old)

    async def _resync_loop(self, period: float) -> None:
        """Replays every cached object as MODIFIED, to heal anything a handler missed."""
        while True:
            await asyncio.sleep(period)
            if self.has_synced():
                for obj in self.store.values():
                    self._emit("MODIFIED", obj, obj)


class InformerFactory:
    """The process's informers, shared by every controller that reads a kind, as
    client-go's SharedInformerFactory: one list+watch and one Store per resource, however
    many controllers read it. Controllers ask for what they read while they are set up;
    the process runs `all()` and waits for them to sync before any worker starts.

    Invariant: at most one Informer per Resource; a namespaced one watches `namespace`
    (None: all), a cluster-scoped one always the whole cluster.
    """

    def __init__(self, kube: Kube, namespace: str | None, resync_period: float | None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.resync_period = resync_period
        self._informers: dict[Resource, Informer] = {}

    def informer(self, resource: Resource, *, indexers: dict[str, Indexer] | None = None,
                 transform: Transform | None = None, metadata_only: bool = False,
                 label_selector: str | None = None, freeze: Freeze | None = None,
                 updated: bool = False) -> Informer:
        """The informer of `resource`, made on first asking. Indexes add up across
        callers; a transform (what the cache drops) has one owner: a second, different
        one is refused, since the first caller's readers rely on what theirs keeps. So
        is asking for whole objects of a metadata-only informer, or the reverse, and a
        label selector other than the first caller's (what the cache holds at all). A
        freeze rule (which objects are kept packed) has one owner too, and so does
        `updated` (its objects are written back whole); another caller may leave
        either unsaid."""
        informer = self._informers.get(resource)
        if informer is None:
            informer = self._informers[resource] = Informer(
                self.kube, resource, self.namespace if resource.namespaced else None,
                indexers=indexers, resync_period=self.resync_period, transform=transform,
                metadata_only=metadata_only, label_selector=label_selector, freeze=freeze,
                updated=updated)
            return informer
        if transform is not None and transform is not informer.transform:
            raise ValueError(f"the {resource.plural} informer has another transform")
        if freeze is not None and freeze is not informer.store.freeze:
            if informer.store.freeze is not None or len(informer.store):
                raise ValueError(f"the {resource.plural} informer has another freeze rule")
            informer.store.freeze = freeze  # the owner asked second, before anything ran
        if updated and not informer.updated:
            if len(informer.store):
                raise ValueError(f"the {resource.plural} informer has run without `updated`")
            informer.updated = True
        if label_selector != informer.label_selector:
            raise ValueError(f"the {resource.plural} informer selects "
                             f"{informer.label_selector or 'everything'}")
        if metadata_only != informer.metadata_only:
            raise ValueError(f"the {resource.plural} informer is "
                             f"{'' if informer.metadata_only else 'not '}metadata-only")
        informer.store.add_indexers(indexers or {})
        return informer

    def get(self, resource: Resource) -> Informer:
        return self._informers[resource]

    def all(self) -> tuple[Informer, ...]:
        return tuple(self._informers.values())

"""An in-memory API server for unit tests: the `Kube` methods the reconcilers call, with
the rules they rely on, in microseconds.

It keeps, per object: a resourceVersion bumped on every write (one counter for the
whole store, as etcd's revision), uid, creationTimestamp, generation (bumped when a
write changes the spec) and a name made from generateName on create (uids and names
drawn from seeded generators: the same objects in every run of a test). It answers as the
API server does, with the same `ApiError` the real `Kube` raises, so
controller/runtime/errors.py classifies it the same way: 404 NotFound, 409
AlreadyExists on create, 409 Conflict when a write or a delete precondition carries a
stale resourceVersion (a PUT's or patch's metadata, a delete's preconditions). A uid in
a write is held as the API server holds it (what `controller.runtime.conflict.pinned`
relies on; measured in tests/cluster/test_namesakes.py): another uid in a PUT's body or
a delete's preconditions is a 409 Conflict ("Precondition failed"); in a patch's body
(merge, strategic merge or apply) it would change an immutable field, a 422 Invalid
("metadata.uid: ... field is immutable"); a server-side apply to a missing object creates
it, unless its body names a uid: then a 409 Conflict ("uid mismatch"). A
status subresource write changes only status; a write to the object never changes
status. A deleted object leaves nothing behind: its name is free at once, and a
namesake created under it gets a new uid. Every change, the test's own included, is
also a watch event in its resource's history (`events`), in resourceVersion order, for
a test that plays the informers. List selects by labels (equality and existence, as
the informers ask: `key`, `!key`, `key=value`, `key!=value`). `admit` adds an admission
webhook (validating or mutating). tests/unit/test_fakekube.py holds it to these.

It is no API server: no schema, no field selectors, and create drops status. The real
one is what tests/cluster runs on; this one lets a unit test drive a reconciler
through every row of its table and count the writes it made.

    kube = FakeKube()
    kube.add(BUILDS, build)                      # seed, not logged
    kube.fail("create", TASKRUNS, status=500)    # the next create of a TaskRun fails
    kube.before("patch", BUILDRUNS, hook)        # hook(call) runs first: raise, or write
    kube.fail("put", BUILDRUNS, status=504, landed=True)  # it lands, the answer is lost
    ...
    assert kube.writes() == [("put", "buildruns", "br", "status")]
"""

from __future__ import annotations

import copy
import itertools
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.runtime.kube import (
    APPLY_PATCH,
    JSON,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Resource,
)

CREATED = "2026-12-04T00:00:00Z"

Call = tuple[str, str, str, str]  # (verb, plural, name, subresource)
Hook = Callable[[Call], None]  # runs before (or after) the call it matches; may raise or write
# An admission webhook's look at a write: (verb, the object stored or None, the object the
# write would store); raising ApiError refuses the write (a validating webhook), changing
# the new object changes what is stored (a mutating one).
Admission = Callable[[str, JSON | None, JSON], None]

# The API server's generateName suffix: five of these (k8s.io/apimachinery's utilrand).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class _Hook:
    verb: str
    plural: str
    subresource: str | None  # None: any
    hook: Hook
    times: int | None  # None: every matching call


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], JSON] = {}
        self.calls: list[Call] = []
        self._revision = itertools.count(1)
        self._hooks: list[_Hook] = []
        self._after_hooks: list[_Hook] = []
        self._admissions: dict[str, list[Admission]] = {}
        # Each resource's watch events ({"type", "object"}) in resourceVersion order.
        self._events: dict[str, list[JSON]] = {}
        self._random = random.Random(0)  # generateName suffixes, the same in every run
        self._uids = random.Random(1)  # uids too, so a test replays the same objects
        # The creationTimestamp of what is created or added from now on (`created`), in a
        # box the views (`with_field_manager`) share.
        self._created = [CREATED]
        # Who wrote: each logged call with the field manager it named (a view's,
        # `with_field_manager`); shared by the views.
        self.field_manager: str | None = None
        self.managers: list[tuple[Call, str | None]] = []

    # -- for the test -----------------------------------------------------------------

    @property
    def created(self) -> str:
        """The creationTimestamp of what is created or added from now on; set it to move
        the fake's clock (its views' too)."""
        return self._created[0]

    @created.setter
    def created(self, value: str) -> None:
        self._created[0] = value

    def add(self, resource: Resource, obj: JSON, namespace: str | None = "ns") -> JSON:
        """Stores `obj` as if created (not logged as a call); returns the stored copy."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            meta.setdefault("namespace", namespace)
        meta.setdefault("uid", str(uuid.UUID(int=self._uids.getrandbits(128), version=4)))
        meta.setdefault("creationTimestamp", self.created)
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._revision))
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        key = self._key(resource, meta.get("namespace"), meta["name"])
        self._event(resource, "MODIFIED" if key in self.objects else "ADDED", obj)
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def modify(self, resource: Resource, name: str, change: Callable[[JSON], object],
               namespace: str | None = "ns") -> JSON:
        """Another writer's write (not logged): `change` edits the stored object in place,
        and its resourceVersion moves on, so a write based on an earlier read conflicts."""
        current = self._existing(resource, namespace, name)
        new = copy.deepcopy(current)
        change(new)
        return self._store(resource, current, new)

    def stored(self, resource: Resource, name: str, namespace: str | None = "ns") -> JSON | None:
        obj = self.peek(resource, name, namespace)
        return copy.deepcopy(obj) if obj is not None else None

    def peek(self, resource: Resource, name: str, namespace: str | None = "ns") -> JSON | None:
        """The stored object itself, not a copy (`stored`'s), for a test that looks often:
        read it, never change it. A write never changes a stored object either: it
        stores a new one."""
        return self.objects.get(self._key(resource, namespace, name))

    def before(self, verb: str, resource: Resource, hook: Hook, *, times: int | None = 1,
               subresource: str | None = None) -> None:
        """`hook(call)` runs before each of the next `times` calls (None: all) of `verb`
        on `resource` (and `subresource`, if given); it may raise, or change the store
        as another writer would. The call is logged whatever the hook does."""
        self._hooks.append(_Hook(verb, resource.plural, subresource, hook, times))

    def after(self, verb: str, resource: Resource, hook: Hook, *, times: int | None = 1,
              subresource: str | None = None) -> None:
        """As `before`, but `hook(call)` runs once the call took effect: if it raises, the
        caller gets the error although the write landed (an answer lost on the way back,
        a timeout after the API server committed)."""
        self._after_hooks.append(_Hook(verb, resource.plural, subresource, hook, times))

    def fail(self, verb: str, resource: Resource, *, status: int = 500,
             reason: str = "InternalError", message: str = "injected", times: int | None = 1,
             subresource: str | None = None, landed: bool = False) -> None:
        """The next `times` calls of `verb` on `resource` raise ApiError(status, reason):
        before they take effect, or with `landed` after."""
        def raise_error(_: Call) -> None:
            raise ApiError(status, reason, message)
        (self.after if landed else self.before)(verb, resource, raise_error, times=times,
                                                subresource=subresource)

    def clear_hooks(self) -> None:
        """Every `before`, `after` and `fail` still armed is dropped (the faults stop);
        admission checks stay."""
        self._hooks.clear()
        self._after_hooks.clear()

    def admit(self, resource: Resource, check: Admission) -> None:
        """`check(verb, stored, new)` runs before every create, put and patch of `resource`
        is stored (not before `add` or `modify`, the test's own writes), as an admission
        webhook: raising ApiError refuses the write; a change to `new` is stored (a
        mutating webhook's defaults)."""
        self._admissions.setdefault(resource.plural, []).append(check)

    def events(self, resource: Resource, start: int = 0, stop: int | None = None) -> list[JSON]:
        """The watch events of `resource` (the `start`-th to before the `stop`-th), copies:
        ADDED, MODIFIED and DELETED, each with the object as it then was (a DELETED one's
        at a resourceVersion of its own, as a watch brings it)."""
        return copy.deepcopy(self._events.get(self._plural(resource), [])[start:stop])

    def event_count(self, resource: Resource) -> int:
        """How many watch events of `resource` there have been."""
        return len(self._events.get(self._plural(resource), []))

    def writes(self) -> list[Call]:
        return [c for c in self.calls if c[0] not in ("get", "list")]

    # -- the Kube interface -------------------------------------------------------------

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        call = self._call("get", resource, name)
        found = copy.deepcopy(self._existing(resource, namespace, name))
        self._after(call)
        return found

    async def get_or_none(self, resource: Resource, namespace: str | None,
                          name: str) -> JSON | None:
        try:
            return await self.get(resource, namespace, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, resource: Resource, namespace: str | None, **query: str | int) -> JSON:
        if "fieldSelector" in query:
            # Not a filter to pass over silently: a test would see objects it should not.
            raise NotImplementedError(f"FakeKube.list does not select by fields: {query}")
        selected = _selector(str(query.get("labelSelector") or ""))
        call = self._call("list", resource, "")
        items = [copy.deepcopy(o) for (plural, ns, _), o in self.objects.items()
                 if plural == self._plural(resource) and namespace in (None, ns)
                 and selected(o["metadata"].get("labels") or {})]
        self._after(call)
        return {"items": items, "metadata": {"resourceVersion": str(next(self._revision))}}

    async def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(
                self._random.choice(_SUFFIX_ALPHABET) for _ in range(5))
        call = self._call("create", resource, meta["name"])
        if self._key(resource, namespace, meta["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists",
                           f'{resource.plural} "{meta["name"]}" already exists')
        for field in ("resourceVersion", "uid", "creationTimestamp", "generation"):
            meta.pop(field, None)  # the server's to set
        body.pop("status", None)  # status is written through its subresource only
        self._admit(resource, "create", None, body)
        created = self.add(resource, body, namespace)
        self._after(call)
        return created

    async def put(self, resource: Resource, namespace: str | None, name: str, body: JSON, *,
                  subresource: str = "") -> JSON:
        call = self._call("put", resource, name, subresource)
        current = self._existing(resource, namespace, name)
        # The body's uid is the update's precondition (rest.DefaultUpdatedObjectInfo),
        # checked before its resourceVersion.
        self._check_version(current, body.get("metadata") or {})
        if subresource == "status":  # only status changes, whatever else the body says
            new = {**copy.deepcopy(current), "status": copy.deepcopy(body.get("status"))}
        else:
            new = copy.deepcopy(body)
            new["metadata"] = {**current["metadata"], **new.get("metadata", {})}
            new["status"] = current.get("status")
        self._admit(resource, "put", current, new)
        stored = self._store(resource, current, new)
        self._after(call)
        return stored

    def with_field_manager(self, name: str) -> FakeKube:
        """A view writing as `name` (Kube.with_field_manager): the same objects and log."""
        view = copy.copy(self)
        view.field_manager = name
        return view

    async def patch(self, resource: Resource, namespace: str | None, name: str, body: Any, *,
                    subresource: str = "", content_type: str = MERGE_PATCH,
                    force: bool = False) -> JSON:
        """A merge patch; a strategic one merges lists by key; an apply (APPLY_PATCH) is
        taken as a merge patch of its fields (one manager here, so nothing conflicts), and
        creates the object when there is none.

        A resourceVersion in the body is a precondition (409 Conflict). A uid in the body
        is no precondition: it is merged into the object like any field, and the API
        server's validation of the result refuses a changed uid, 422 Invalid; an apply to
        no object with a uid in its body is refused 409 Conflict instead of creating one."""
        call = self._call("patch", resource, name, subresource)
        given = (body.get("metadata") or {}) if isinstance(body, dict) else {}
        current = self.objects.get(self._key(resource, namespace, name))
        if current is None and content_type == APPLY_PATCH and not subresource:
            if given.get("uid"):
                raise ApiError(409, "Conflict", "uid mismatch: the provided object specified "
                               f"uid {given['uid']}, and no existing object was found")
            return await self._apply_create(resource, namespace, name, body, call)
        current = self._existing(resource, namespace, name)
        self._check_version(current, {"resourceVersion": given.get("resourceVersion")})
        if given.get("uid") and given["uid"] != current["metadata"]["uid"]:
            kind = f"{resource.kind}.{resource.group}" if resource.group else resource.kind
            raise ApiError(422, "Invalid", f'{kind} "{name}" is invalid: metadata.uid: '
                           f'Invalid value: "{given["uid"]}": field is immutable')
        new = _merge(current, body, strategic=content_type == STRATEGIC_MERGE_PATCH)
        if subresource == "status":  # only status changes, whatever else the body says
            new = {**copy.deepcopy(current), "status": new.get("status")}
        else:
            new["status"] = copy.deepcopy(current.get("status"))
        self._admit(resource, "patch", current, new)
        stored = self._store(resource, current, new)
        self._after(call)
        return stored

    async def _apply_create(self, resource: Resource, namespace: str | None, name: str,
                            body: JSON, call: Call) -> JSON:
        """A server-side apply to no object creates it from the applied fields (status
        dropped, as a create drops it), through the admission webhooks as a create."""
        new = copy.deepcopy(body)
        meta = new.setdefault("metadata", {})
        meta["name"] = name
        for field in ("resourceVersion", "uid", "creationTimestamp", "generation"):
            meta.pop(field, None)
        new.pop("status", None)
        self._admit(resource, "create", None, new)
        created = self.add(resource, new, namespace)
        self._after(call)
        return created

    async def delete(self, resource: Resource, namespace: str | None, name: str, *,
                     preconditions: JSON | None = None) -> JSON:
        call = self._call("delete", resource, name)
        self.remove(resource, name, namespace, preconditions=preconditions)
        self._after(call)
        return {"kind": "Status", "status": "Success"}

    def remove(self, resource: Resource, name: str, namespace: str | None = "ns", *,
               preconditions: JSON | None = None) -> None:
        """Deletes the object (the test's own delete, not logged; `delete` is the client's):
        gone at once, its name free, a DELETED watch event."""
        current = self._existing(resource, namespace, name)
        self._check_version(current, preconditions or {})
        del self.objects[self._key(resource, namespace, name)]
        gone = copy.deepcopy(current)
        gone["metadata"]["resourceVersion"] = str(next(self._revision))
        self._event(resource, "DELETED", gone)

    # -- the rules ----------------------------------------------------------------------

    def _call(self, verb: str, resource: Resource, name: str, subresource: str = "") -> Call:
        call = (verb, resource.plural, name, subresource)
        self.calls.append(call)
        self.managers.append((call, self.field_manager))
        _run_hooks(self._hooks, call)
        return call

    def _after(self, call: Call) -> None:
        _run_hooks(self._after_hooks, call)

    def _admit(self, resource: Resource, verb: str, current: JSON | None, new: JSON) -> None:
        for check in self._admissions.get(resource.plural, []):
            check(verb, copy.deepcopy(current), new)

    def _event(self, resource: Resource, kind: str, obj: JSON) -> None:
        # The object as stored, shared: never changed in place (`peek`); `events` copies.
        self._events.setdefault(self._plural(resource), []).append({"type": kind, "object": obj})

    @staticmethod
    def _plural(resource: Resource) -> str:
        return f"{resource.plural}.{resource.group}"

    def _key(self, resource: Resource, namespace: str | None,
             name: str) -> tuple[str, str | None, str]:
        return (self._plural(resource), namespace if resource.namespaced else None, name)

    def _existing(self, resource: Resource, namespace: str | None, name: str) -> JSON:
        obj = self.objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
        return obj

    @staticmethod
    def _check_version(current: JSON, given: JSON) -> None:
        """A uid or resourceVersion in a PUT's body or a delete's preconditions must be the
        stored one: else 409 Conflict, as the API server answers (the uid first)."""
        stored = current["metadata"]
        if given.get("uid") is not None and given["uid"] != stored["uid"]:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: "
                           f"{given['uid']}, UID in object meta: {stored['uid']}")
        if given.get("resourceVersion") is not None and \
                given["resourceVersion"] != stored["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified; please "
                           "apply your changes to the latest version and try again")

    def _store(self, resource: Resource, current: JSON, new: JSON) -> JSON:
        meta = new["metadata"]
        for field in ("uid", "creationTimestamp", "namespace", "name"):
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
        generation = current["metadata"].get("generation", 1)
        meta["generation"] = generation + (new.get("spec") != current.get("spec"))
        meta["resourceVersion"] = str(next(self._revision))
        self.objects[self._key(resource, meta.get("namespace"), meta["name"])] = new
        self._event(resource, "MODIFIED", new)
        return copy.deepcopy(new)


def _run_hooks(hooks: list[_Hook], call: Call) -> None:
    verb, plural, _, subresource = call
    for hook in list(hooks):
        if (hook.verb, hook.plural) != (verb, plural) or hook.times == 0 or (
                hook.subresource is not None and hook.subresource != subresource):
            continue
        if hook.times is not None:
            hook.times -= 1
        hook.hook(call)


def _selector(text: str) -> Callable[[dict[str, str]], bool]:
    """A label selector's equality and existence requirements (`key`, `!key`, `key=value`,
    `key==value`, `key!=value`, comma-separated, all of them to hold); the set-based
    ones (`in`, `notin`) are refused rather than ignored."""
    requirements = [_requirement(r.strip()) for r in text.split(",") if r.strip()]
    return lambda labels: all(holds(labels) for holds in requirements)


def _requirement(text: str) -> Callable[[dict[str, str]], bool]:
    if " in " in text or " notin " in text or "(" in text:
        raise NotImplementedError(f"FakeKube.list does not select by sets: {text}")
    if "!=" in text:
        key, value = (p.strip() for p in text.split("!=", 1))
        return lambda labels: labels.get(key) != value
    if "=" in text:
        key, value = (p.strip() for p in text.replace("==", "=").split("=", 1))
        return lambda labels: labels.get(key) == value
    if text.startswith("!"):
        return lambda labels: text[1:].strip() not in labels
    return lambda labels: text in labels


def _merge(target: Any, patch: Any, *, strategic: bool) -> Any:
    """RFC 7386 merge patch; with `strategic`, a list of named objects (a ServiceAccount's
    secrets) is merged by name, as the API server's strategic merge patch does."""
    if not isinstance(patch, dict):
        if strategic and isinstance(patch, list) and isinstance(target, list) and all(
                isinstance(x, dict) and "name" in x for x in [*patch, *target]):
            names = {x["name"] for x in target}
            return copy.deepcopy(target) + [copy.deepcopy(x) for x in patch
                                            if x["name"] not in names]
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value, strategic=strategic)
    return merged

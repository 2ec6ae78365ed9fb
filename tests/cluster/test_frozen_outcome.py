"""A finished BuildRun's status cannot be changed or removed through the API, whatever the
form of the write (issue 39, part 1): the rule on the whole BuildRun in our CRD
(devtools/crds/crdgen.py, `_frozen_status_rule`), on the session's real API server.

Every form a client can send to the status subresource (an update, a merge patch, a JSON
patch, a server-side apply by our own field manager and by another, with and without
force, one that omits fields its manager owned) is sent to a finished BuildRun: each is
refused (422, with the rule's message naming what changed) and the stored object is
unchanged. The same write to an unfinished BuildRun, the control, is accepted and
changes the status, so each refusal is the rule's doing and not the write's own fault.
A write that only removes or changes completionTime has nothing to touch on an
unfinished BuildRun: its control is the same write on startTime, the other timestamp.

Then: the main resource never carries the status (the API server keeps the stored one),
a write that leaves a finished BuildRun's status as it is (metadata, spec.retention, the
status rewritten as read, deletion) still goes through, and what the schema itself
refuses on any BuildRun.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.buildrun.states import Action, Decision
from controller.buildrun.status import Outcome
from controller.buildrun.status_writes import finished, status_update
from controller.runtime.kube import APPLY_PATCH, JSON, ApiError, Kube
from controller.shipwright.field_managers import BUILDRUN_CONTROLLER
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.crds.crdgen import FROZEN_COMPLETION_TIME, FROZEN_STATUS, FROZEN_SUCCEEDED

pytestmark = pytest.mark.cluster

JSON_PATCH = "application/json-patch+json"
# Another field manager: kubectl's name for its server-side applies.
OTHER = "kubectl"
START, DONE, LATER = "2026-12-06T01:00:00Z", "2026-12-06T01:05:00Z", "2027-01-01T00:00:00Z"
DIGEST, OTHER_DIGEST = "sha256:" + "ab" * 32, "sha256:" + "cd" * 32

Path = tuple[str | int, ...]  # a place in the status; () is the status itself
ABSENT = object()  # what `dig` finds where nothing is


def status(*, done: bool) -> JSON:
    """What the controller writes when a TaskRun succeeds (status_writes.finished on the
    status of a started BuildRun: the Succeeded condition, completionTime, output and
    source), or the same without completionTime: the control, an unfinished BuildRun
    with every field the writes below touch."""
    started = {"taskRunName": "run", "executor": {"kind": "TaskRun", "name": "run"},
               "startTime": START, "buildSpec": fixtures.build_spec()}
    outcome = Outcome("True", reasons.SUCCEEDED, "All Steps have completed executing", None,
                      DIGEST, output={"digest": DIGEST, "size": 1234},
                      source={"git": {"commitSha": "0" * 40, "branchName": "main"}})
    written = finished(Decision(Action.FINISH, outcome.reason, outcome.message, outcome.status,
                                outcome=outcome), None, DONE)(started)
    if not done:
        del written["completionTime"]
    return written


def condition(status_value: str, reason: str, type_: str = "Succeeded") -> JSON:
    return {"type": type_, "status": status_value, "reason": reason, "message": "by hand",
            "lastTransitionTime": LATER}


# Another value for each place a write below changes.
CHANGED: dict[Path, Any] = {
    (): {},
    ("completionTime",): LATER,
    ("startTime",): LATER,
    ("conditions",): [condition("False", reasons.FAILED)],
    ("conditions", 0): condition("False", reasons.FAILED),
    ("conditions", 0, "status"): "False",
    ("output",): {"digest": OTHER_DIGEST},
    ("output", "digest"): OTHER_DIGEST,
}
# What a server-side apply by another manager adds where nobody owns anything.
ADDED: dict[Path, Any] = {
    ("conditions",): [condition("True", "Reviewed", type_="Reviewed")],
    ("failureDetails",): {"reason": "ByHand", "message": "written by hand"},
}


def dig(obj: Any, path: Path) -> Any:
    for key in path:
        found = ((isinstance(obj, dict) and key in obj)
                 or (isinstance(obj, list) and isinstance(key, int) and key < len(obj)))
        if not found:
            return ABSENT
        obj = obj[key]
    return obj


def without(status_: JSON, path: Path) -> JSON:
    out = copy.deepcopy(status_)
    del dig(out, path[:-1])[path[-1]]
    return out


def replaced(status_: JSON, path: Path, value: Any) -> JSON:
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(status_)
    dig(out, path[:-1])[path[-1]] = copy.deepcopy(value)
    return out


def nested(path: Path, value: Any) -> Any:
    """The least object that puts `value` at `path`; an item of conditions (a map keyed by
    type) is named by its type, as a merge or an apply needs it."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        item = nested(rest, value)
        return [item if "type" in item else {"type": "Succeeded", **item}]
    return {head: nested(rest, value)}


def pointer(path: Path) -> str:
    return "/status" + "".join(f"/{key}" for key in path)


def intent(name: str, namespace: str, status_: Any) -> JSON:
    """A server-side apply of the status: the object's identity and `status_`."""
    return {"apiVersion": BUILDRUNS.api_version, "kind": BUILDRUNS.kind,
            "metadata": {"name": name, "namespace": namespace}, "status": status_}


@dataclass(frozen=True)
class Write:
    """One write of a BuildRun's status: `form` says how it is sent, `path` what it
    touches, `refusal` the rule's message on a finished BuildRun, `finish` how that
    BuildRun got its status: "update" as the controller writes it, or "apply" by our own
    field manager, so that its later applies own the fields."""

    form: str
    path: Path
    refusal: str
    finish: str = "update"

    def __str__(self) -> str:
        return f"{self.form}:{'/'.join(map(str, self.path)) or 'status'}"

    def control_path(self) -> Path:
        """The same place on an unfinished BuildRun, which has no completionTime."""
        return tuple("startTime" if key == "completionTime" else key for key in self.path)

    async def send(self, kube: Kube, stored: JSON, path: Path) -> JSON:
        meta = stored["metadata"]
        ns, name, old = meta["namespace"], meta["name"], stored.get("status") or {}
        verb, _, how = self.form.partition("-")
        if verb == "put":
            body = status_update(stored, {})  # as the controller sends it, then the status
            del body["status"]
            if how == "null":
                body["status"] = None
            elif how == "changed":
                body["status"] = replaced(old, path, CHANGED[path])
            elif path:
                body["status"] = without(old, path)
            return await kube.put(BUILDRUNS, ns, name, body, subresource="status")
        if verb == "merge":
            value = None if how == "null" else CHANGED[path]
            return await kube.patch(BUILDRUNS, ns, name, {"status": nested(path, value)},
                                    subresource="status")
        if verb == "json":
            op: JSON = {"op": how, "path": pointer(path)}
            if how == "replace":
                op["value"] = CHANGED[path]
            return await kube.patch(BUILDRUNS, ns, name, [op], subresource="status",
                                    content_type=JSON_PATCH)
        # A server-side apply: `how` is "omitting" or "changed" (our manager's whole
        # intent, as it applied the status), "forced" (ours, over the update's claim),
        # "other-forced" or "other-adding" (another manager's, a part).
        manager = OTHER if how.startswith("other") else BUILDRUN_CONTROLLER
        if how == "omitting":
            applied = without(old, path)
        elif how == "changed":
            applied = replaced(old, path, CHANGED[path])
        else:
            applied = nested(path, ADDED[path] if how == "other-adding" else CHANGED[path])
        return await kube.with_field_manager(manager).patch(
            BUILDRUNS, ns, name, intent(name, ns, applied), subresource="status",
            content_type=APPLY_PATCH, force=how.endswith("forced"))


ST, CT, SU = FROZEN_STATUS, FROZEN_COMPLETION_TIME, FROZEN_SUCCEEDED
WHOLE: Path = ()
COMPLETION: Path = ("completionTime",)
START_TIME: Path = ("startTime",)
CONDITIONS: Path = ("conditions",)
SUCCEEDED: Path = ("conditions", 0)
SUCCEEDED_STATUS: Path = ("conditions", 0, "status")
OUTPUT: Path = ("output",)
DIGEST_PATH: Path = ("output", "digest")

WRITES = [
    # An update (PUT) of the status subresource: the BuildRun as read, its status
    # left out, null, or with a field left out or changed ({} for the whole status).
    Write("put-without", WHOLE, ST),
    Write("put-null", WHOLE, ST),
    *(Write("put-without", p, m) for p, m in
      ((COMPLETION, CT), (CONDITIONS, SU), (OUTPUT, ST), (DIGEST_PATH, ST))),
    *(Write("put-changed", p, m) for p, m in
      ((WHOLE, CT), (COMPLETION, CT), (START_TIME, ST), (SUCCEEDED_STATUS, SU),
       (DIGEST_PATH, ST))),
    # A merge patch of the status subresource: null removes, a list is replaced whole.
    *(Write("merge-null", p, m) for p, m in
      ((WHOLE, ST), (COMPLETION, CT), (CONDITIONS, SU), (OUTPUT, ST), (DIGEST_PATH, ST))),
    *(Write("merge-changed", p, m) for p, m in
      ((COMPLETION, CT), (CONDITIONS, SU), (DIGEST_PATH, ST))),
    # A JSON patch (RFC 6902) of the status subresource, at each level.
    *(Write("json-remove", p, m) for p, m in
      ((WHOLE, ST), (COMPLETION, CT), (CONDITIONS, SU), (SUCCEEDED, SU), (OUTPUT, ST),
       (DIGEST_PATH, ST))),
    *(Write("json-replace", p, m) for p, m in
      ((WHOLE, CT), (COMPLETION, CT), (CONDITIONS, SU), (SUCCEEDED, SU),
       (SUCCEEDED_STATUS, SU), (OUTPUT, ST), (DIGEST_PATH, ST))),
    # Server-side applies by our own field manager, without force, of the status it
    # applied: a field omitted (which removes it) or changed.
    *(Write("apply-omitting", p, m, finish="apply") for p, m in
      ((COMPLETION, CT), (CONDITIONS, SU), (OUTPUT, ST))),
    *(Write("apply-changed", p, m, finish="apply") for p, m in
      ((COMPLETION, CT), (SUCCEEDED_STATUS, SU))),
    # Ours with force, over the claim of the controller's update (without force it is
    # a conflict with it).
    Write("apply-forced", COMPLETION, CT),
    # Another manager's: with force over the controller's claim; without, a field
    # nobody owns (another condition, failure details).
    *(Write("apply-other-forced", p, m) for p, m in
      ((COMPLETION, CT), (SUCCEEDED_STATUS, SU), (DIGEST_PATH, ST))),
    *(Write("apply-other-adding", p, ST) for p in (CONDITIONS, ("failureDetails",))),
]


@pytest.fixture(scope="module")
async def ns(kube: Kube) -> AsyncIterator[str]:
    """One namespace for the module: its BuildRuns have names of their own and no
    controller runs, so nothing else is needed."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    await fixtures.create_namespace(kube, name)
    yield name
    await kube.delete(fixtures.NAMESPACES, None, name)


async def buildrun(kube: Kube, ns: str, name: str, *, done: bool,
                   finish: str = "update") -> JSON:
    """A BuildRun with `status(done=...)`, written as `finish` says (Write), as stored."""
    created = await kube.create(BUILDRUNS, ns, fixtures.buildrun(
        name, retention={"ttlAfterSucceeded": "1h"}))
    ours = kube.with_field_manager(BUILDRUN_CONTROLLER)
    if finish == "update":
        await ours.put(BUILDRUNS, ns, name, status_update(created, status(done=done)),
                       subresource="status")
    else:
        await ours.patch(BUILDRUNS, ns, name, intent(name, ns, status(done=done)),
                         subresource="status", content_type=APPLY_PATCH)
    return await kube.get(BUILDRUNS, ns, name)


def named(*parts: object) -> str:
    """A BuildRun name (a DNS subdomain) made of a test's parameters."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(map(str, parts)).lower()).strip("-")


@pytest.mark.parametrize("write", WRITES, ids=str)
async def test_every_write_of_a_finished_buildruns_status_is_refused(
    kube: Kube, ns: str, write: Write,
) -> None:
    done = await buildrun(kube, ns, named(write, "done"), done=True, finish=write.finish)
    with pytest.raises(ApiError) as refused:
        await write.send(kube, done, write.path)
    assert refused.value.status == 422, refused.value
    assert write.refusal in refused.value.message, refused.value.message
    assert await kube.get(BUILDRUNS, ns, done["metadata"]["name"]) == done

    # The control: the same write to an unfinished BuildRun goes through and changes it.
    path = write.control_path()
    running = await buildrun(kube, ns, named(write, "running"), done=False,
                             finish=write.finish)
    await write.send(kube, running, path)
    after = await kube.get(BUILDRUNS, ns, running["metadata"]["name"])
    assert dig(after.get("status"), path) != dig(running["status"], path), after.get("status")


# Writes of the main resource that try to carry a status: the API server keeps the stored
# status (the status subresource's), and the rest of the write lands (a label).
LABELLED = {"reviewed": "yes"}


async def _main_put(kube: Kube, stored: JSON) -> JSON:
    body = status_update(stored, {})  # the object as read, less managedFields
    del body["status"]
    body["metadata"]["labels"] = LABELLED
    return await kube.put(BUILDRUNS, stored["metadata"]["namespace"],
                          stored["metadata"]["name"], body)


async def _main_merge(kube: Kube, stored: JSON) -> JSON:
    return await kube.patch(BUILDRUNS, stored["metadata"]["namespace"],
                            stored["metadata"]["name"],
                            {"metadata": {"labels": LABELLED}, "status": None})


async def _main_json(kube: Kube, stored: JSON) -> JSON:
    return await kube.patch(BUILDRUNS, stored["metadata"]["namespace"],
                            stored["metadata"]["name"],
                            [{"op": "add", "path": "/metadata/labels", "value": LABELLED},
                             {"op": "remove", "path": "/status"}], content_type=JSON_PATCH)


async def _main_apply(kube: Kube, stored: JSON) -> JSON:
    meta = stored["metadata"]
    body = intent(meta["name"], meta["namespace"], {"completionTime": LATER})
    body["metadata"]["labels"] = LABELLED
    return await kube.with_field_manager(OTHER).patch(
        BUILDRUNS, meta["namespace"], meta["name"], body, content_type=APPLY_PATCH,
        force=True)


@pytest.mark.parametrize("send", [_main_put, _main_merge, _main_json, _main_apply],
                         ids=["put", "merge-patch", "json-patch", "apply"])
@pytest.mark.parametrize("done", [True, False], ids=["finished", "unfinished"])
async def test_the_main_resource_never_carries_the_status(kube: Kube, ns: str, send: Any,
                                                           done: bool) -> None:
    stored = await buildrun(kube, ns, named("main", send.__name__, done), done=done)
    written = await send(kube, stored)
    assert written["metadata"]["labels"] == LABELLED
    assert written["status"] == stored["status"]
    assert (await kube.get(BUILDRUNS, ns, stored["metadata"]["name"]))["status"] == (
        stored["status"])


async def test_what_leaves_the_status_as_it_is_still_goes_through(kube: Kube, ns: str) -> None:
    """On a finished BuildRun: labels, annotations, a finalizer added and removed, its
    retention TTL raised, its status and the whole object written back as read (what
    `buildrun-controller migrate-storage` does), and deletion. The control: the retention
    change is refused while the BuildRun runs (spec.retention's own rule)."""
    name = "allowed"
    done = await buildrun(kube, ns, name, done=True)
    meta = {"labels": {"team": "a"}, "annotations": {"note": "kept"}, "finalizers": ["x/y"]}
    await kube.patch(BUILDRUNS, ns, name, {"metadata": meta})
    await kube.patch(BUILDRUNS, ns, name, {"metadata": {"finalizers": None}})
    await kube.patch(BUILDRUNS, ns, name, {"spec": {"retention": {"ttlAfterSucceeded": "2h"}}})
    read = await kube.get(BUILDRUNS, ns, name)
    await kube.put(BUILDRUNS, ns, name, status_update(read, read["status"]),
                   subresource="status")
    read = await kube.get(BUILDRUNS, ns, name)
    await kube.put(BUILDRUNS, ns, name, status_update(read, read["status"]))
    after = await kube.get(BUILDRUNS, ns, name)
    assert after["status"] == done["status"]
    assert after["spec"]["retention"] == {"ttlAfterSucceeded": "2h"}
    assert after["metadata"]["labels"] == meta["labels"]
    assert after["metadata"]["annotations"] == meta["annotations"]
    assert not after["metadata"].get("finalizers")
    await kube.delete(BUILDRUNS, ns, name)
    assert await kube.get_or_none(BUILDRUNS, ns, name) is None

    await buildrun(kube, ns, "allowed-running", done=False)
    with pytest.raises(ApiError) as refused:
        await kube.patch(BUILDRUNS, ns, "allowed-running",
                         {"spec": {"retention": {"ttlAfterSucceeded": "2h"}}})
    assert "spec.retention is immutable until the BuildRun has finished" in (
        refused.value.message)


async def _remove_the_conditions_status(kube: Kube, stored: JSON) -> JSON:
    meta = stored["metadata"]
    return await kube.patch(BUILDRUNS, meta["namespace"], meta["name"],
                            [{"op": "remove", "path": pointer(SUCCEEDED_STATUS)}],
                            subresource="status", content_type=JSON_PATCH)


async def _apply_an_empty_status(kube: Kube, stored: JSON) -> JSON:
    meta = stored["metadata"]
    return await kube.with_field_manager(BUILDRUN_CONTROLLER).patch(
        BUILDRUNS, meta["namespace"], meta["name"], intent(meta["name"], meta["namespace"], {}),
        subresource="status", content_type=APPLY_PATCH)


@pytest.mark.parametrize("send", [_remove_the_conditions_status, _apply_an_empty_status],
                         ids=["json-remove-condition-status", "apply-empty"])
@pytest.mark.parametrize("done", [True, False], ids=["finished", "unfinished"])
async def test_what_the_schema_refuses_on_any_buildrun_before_the_rule(
    kube: Kube, ns: str, send: Any, done: bool,
) -> None:
    """Two writes that take a required part away, refused by the schema whether the
    BuildRun has finished or not, so the rule is never asked (the API server says its
    rules were not checked): a JSON patch removing the Succeeded condition's status, and
    an apply by our own manager of an empty status (every field it owned omitted, which
    leaves the status null)."""
    stored = await buildrun(kube, ns, named("schema", send.__name__, done),
                            done=done, finish="apply")
    with pytest.raises(ApiError) as refused:
        await send(kube, stored)
    assert refused.value.status == 422
    assert "some validation rules were not checked" in refused.value.message
    assert await kube.get(BUILDRUNS, ns, stored["metadata"]["name"]) == stored

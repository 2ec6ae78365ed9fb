"""tests/fakekube.py answers as the API server does where the reconcilers' unit tests
rely on it, with errors controller/runtime/errors.py classifies as it classifies the
real ones. (The real API server's answers are what tests/cluster runs on.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from controller.runtime.errors import (
    RetryableError,
    classify,
    is_already_exists,
    is_conflict,
    is_invalid,
    is_not_found,
)
from controller.runtime.kube import (
    APPLY_PATCH,
    JSON,
    MERGE_PATCH,
    SERVICEACCOUNTS,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Resource,
)
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from tests.fakekube import Call, FakeKube


async def raised(kube_call: Awaitable[object]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await kube_call
    return caught.value


async def test_every_write_moves_the_resource_version_and_keeps_uid_and_creation() -> None:
    kube = FakeKube()
    created = await kube.create(BUILDRUNS, "ns", {"metadata": {"name": "br"}, "spec": {}})
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    patched = await kube.patch(BUILDRUNS, "ns", "br", {"spec": {"state": "BuildRunCanceled"}})
    assert int(patched["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert patched["metadata"]["generation"] == 2  # the spec changed
    labelled = await kube.patch(BUILDRUNS, "ns", "br", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 2  # metadata alone: no new generation
    assert labelled["metadata"]["uid"] == meta["uid"]
    assert labelled["metadata"]["creationTimestamp"] == meta["creationTimestamp"]
    assert int(labelled["metadata"]["resourceVersion"]) > int(
        patched["metadata"]["resourceVersion"])


async def test_errors_are_the_ones_the_real_client_raises_and_are_classified_alike() -> None:
    kube = FakeKube()
    missing = await raised(kube.get(BUILDRUNS, "ns", "br"))
    assert is_not_found(missing) and await kube.get_or_none(BUILDRUNS, "ns", "br") is None
    assert is_not_found(await raised(kube.patch(BUILDRUNS, "ns", "br", {})))
    assert is_not_found(await raised(kube.delete(BUILDRUNS, "ns", "br")))

    first = await kube.create(BUILDRUNS, "ns", {"metadata": {"name": "br"}})
    again = await raised(kube.create(BUILDRUNS, "ns", {"metadata": {"name": "br"}}))
    assert is_already_exists(again) and not is_conflict(again)

    await kube.patch(BUILDRUNS, "ns", "br", {"metadata": {"labels": {"a": "b"}}})
    stale = {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]},
             "status": {"x": 1}}
    conflict = await raised(kube.patch(BUILDRUNS, "ns", "br", stale, subresource="status"))
    assert is_conflict(conflict) and not is_already_exists(conflict)
    assert isinstance(classify(conflict), RetryableError)
    assert is_conflict(await raised(kube.put(BUILDRUNS, "ns", "br", stale)))
    wrong_uid = kube.delete(BUILDRUNS, "ns", "br", preconditions={"uid": "another"})
    assert is_conflict(await raised(wrong_uid))
    assert kube.stored(BUILDRUNS, "br") is not None


async def test_status_is_written_through_its_subresource_only() -> None:
    kube = FakeKube()
    kube.add(BUILDRUNS, {"metadata": {"name": "br"}, "spec": {"a": 1}, "status": {"s": 1}})
    await kube.patch(BUILDRUNS, "ns", "br", {"spec": {"a": 2}, "status": {"s": 2}})
    assert spec_and_status(kube) == ({"a": 2}, {"s": 1})
    await kube.patch(BUILDRUNS, "ns", "br", {"spec": {"a": 3}, "status": {"s": 3, "t": None}},
                     subresource="status")
    assert spec_and_status(kube) == ({"a": 2}, {"s": 3})
    current = await kube.get(BUILDRUNS, "ns", "br")
    await kube.put(BUILDRUNS, "ns", "br", {**current, "spec": {"a": 4}, "status": {"s": 4}})
    assert spec_and_status(kube) == ({"a": 4}, {"s": 3})
    current = await kube.get(BUILDRUNS, "ns", "br")
    await kube.put(BUILDRUNS, "ns", "br", {**current, "spec": {"a": 5}, "status": {"t": 5}},
                   subresource="status")  # replaces status whole, keeps the spec
    assert spec_and_status(kube) == ({"a": 4}, {"t": 5})
    assert is_conflict(await raised(kube.put(BUILDRUNS, "ns", "br", current,
                                             subresource="status")))
    created = await kube.create(BUILDRUNS, "ns", {"metadata": {"name": "b2"}, "status": {}})
    assert "status" not in created


def spec_and_status(kube: FakeKube) -> tuple[JSON, JSON]:
    stored = kube.stored(BUILDRUNS, "br")
    assert stored is not None
    return stored["spec"], stored["status"]


async def test_a_strategic_merge_patch_merges_secrets_by_name() -> None:
    kube = FakeKube()
    kube.add(SERVICEACCOUNTS, {"metadata": {"name": "sa"}, "secrets": [{"name": "a"}]})
    body = {"secrets": [{"name": "a"}, {"name": "push"}]}
    await kube.patch(SERVICEACCOUNTS, "ns", "sa", body, content_type=STRATEGIC_MERGE_PATCH)
    assert kube.stored(SERVICEACCOUNTS, "sa")["secrets"] == [  # type: ignore[index]
        {"name": "a"}, {"name": "push"}]
    await kube.patch(SERVICEACCOUNTS, "ns", "sa", {"secrets": [{"name": "b"}]})  # merge: replaces
    assert kube.stored(SERVICEACCOUNTS, "sa")["secrets"] == [{"name": "b"}]  # type: ignore[index]


async def test_a_view_writes_as_its_manager_into_the_same_store_at_the_same_time() -> None:
    kube = FakeKube()
    view = kube.with_field_manager("them")
    kube.created = "2026-12-04T01:02:03Z"  # set after the view was made
    created = await view.create(TASKRUNS, "ns", {"metadata": {"name": "tr"}})
    assert created["metadata"]["creationTimestamp"] == "2026-12-04T01:02:03Z"
    assert kube.stored(TASKRUNS, "tr") == created
    assert kube.managers == [(("create", "taskruns", "tr", ""), "them")]
    assert FakeKube().add(TASKRUNS, {"metadata": {"name": "x"}})["metadata"]["uid"] == \
        FakeKube().add(TASKRUNS, {"metadata": {"name": "x"}})["metadata"]["uid"]  # replayed


async def test_generate_name_makes_a_fresh_name_each_time() -> None:
    kube = FakeKube()
    body: JSON = {"metadata": {"generateName": "br-"}}
    names = {(await kube.create(TASKRUNS, "ns", body))["metadata"]["name"] for _ in range(3)}
    assert len(names) == 3 and all(n.startswith("br-") and len(n) == 8 for n in names)
    assert {name for _, _, name, _ in kube.calls} == names  # logged under the name made


async def test_injected_errors_and_hooks_run_before_the_call_they_match() -> None:
    kube = FakeKube()
    kube.add(BUILDRUNS, {"metadata": {"name": "br"}})
    kube.fail("patch", BUILDRUNS, status=503, reason="ServiceUnavailable", times=2,
              subresource="status")
    for _ in range(2):
        error = await raised(kube.patch(BUILDRUNS, "ns", "br", {}, subresource="status"))
        assert (error.status, error.reason) == (503, "ServiceUnavailable")
    await kube.patch(BUILDRUNS, "ns", "br", {}, subresource="status")  # spent
    await kube.patch(BUILDRUNS, "ns", "br", {})

    seen: list[Call] = []
    kube.before("delete", BUILDRUNS, seen.append, times=None)
    await kube.delete(BUILDRUNS, "ns", "br")
    assert seen == [("delete", "buildruns", "br", "")]
    assert kube.writes() == [("patch", "buildruns", "br", "status")] * 3 + [
        ("patch", "buildruns", "br", ""), ("delete", "buildruns", "br", "")]


async def test_list_selects_by_labels_as_the_informers_ask_and_refuses_the_rest() -> None:
    kube = FakeKube()
    kube.add(BUILDRUNS, {"metadata": {"name": "br"}})
    kube.add(TASKRUNS, {"metadata": {"name": "mine", "labels": {"buildrun.shipwright.io/name":
                                                                 "br", "tier": "a"}}})
    kube.add(TASKRUNS, {"metadata": {"name": "theirs", "labels": {"tier": "b"}}})
    assert [o["metadata"]["name"] for o in (await kube.list(BUILDRUNS, "ns"))["items"]] == [
        "br"]
    assert (await kube.list(BUILDRUNS, "other"))["items"] == []

    async def names(selector: str) -> list[str]:
        page = await kube.list(TASKRUNS, "ns", labelSelector=selector, limit=500)
        return [o["metadata"]["name"] for o in page["items"]]

    assert await names("buildrun.shipwright.io/name") == ["mine"]  # OWN_RUNS: existence
    assert await names("!buildrun.shipwright.io/name") == ["theirs"]
    assert await names("tier=b") == await names("tier==b") == ["theirs"]
    assert await names("tier!=b") == ["mine"]
    assert await names("tier=a,buildrun.shipwright.io/name=br") == ["mine"]
    assert await names("tier=a,tier=b") == []
    assert await names("") == ["mine", "theirs"]
    for refused in ({"labelSelector": "tier in (a,b)"}, {"fieldSelector": "metadata.name=br"}):
        with pytest.raises(NotImplementedError):  # not a filter to pass over silently
            await kube.list(TASKRUNS, "ns", **refused)


async def namesake(kube: FakeKube, resource: Resource = BUILDRUNS) -> tuple[JSON, JSON]:
    """Object "br" (its `old` copy), deleted and created again: another uid, its name."""
    old = kube.add(resource, {"metadata": {"name": "br"}, "spec": {}})
    kube.remove(resource, "br")
    new = await kube.create(resource, "ns", {"metadata": {"name": "br"}, "spec": {}})
    assert new["metadata"]["uid"] != old["metadata"]["uid"]  # the name free, a new uid
    return old, new


@pytest.mark.parametrize("content_type", [MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH])
async def test_a_patch_naming_another_uid_is_invalid_as_on_the_api_server(
        content_type: str) -> None:
    """A uid in a patch's body is merged like any field; the API server's validation of
    the result then refuses the changed uid: 422 Invalid, "metadata.uid: Invalid value:
    ...: field is immutable" (tests/cluster/test_namesakes.py)."""
    kube = FakeKube()
    old, new = await namesake(kube)
    stale = {"metadata": {"uid": old["metadata"]["uid"]}, "spec": {"a": 1}}
    error = await raised(kube.patch(BUILDRUNS, "ns", "br", stale, content_type=content_type))
    assert (error.status, error.reason) == (422, "Invalid") and is_invalid(error)
    assert f'metadata.uid: Invalid value: "{old["metadata"]["uid"]}": field is immutable' \
        in error.message
    assert kube.stored(BUILDRUNS, "br") == new  # nothing landed
    # The control: its own uid, and the patch lands.
    await kube.patch(BUILDRUNS, "ns", "br", {**stale, "metadata": {"uid": new["metadata"]["uid"]}},
                     content_type=content_type)
    assert kube.stored(BUILDRUNS, "br")["spec"] == {"a": 1}  # type: ignore[index]


async def test_an_apply_naming_a_uid_to_no_object_is_a_conflict_as_on_the_api_server() -> None:
    """A server-side apply creates a missing object, but not one whose body names a uid:
    409 Conflict, "uid mismatch: the provided object specified uid ..., and no existing
    object was found"; nothing created. Without a uid it creates the object."""
    kube = FakeKube()
    old = kube.add(TASKRUNS, {"metadata": {"name": "tr"}, "spec": {"a": 1}})
    kube.remove(TASKRUNS, "tr")
    intent = {"metadata": {"name": "tr", "uid": old["metadata"]["uid"]},
              "spec": {"status": "TaskRunCancelled"}}
    error = await raised(kube.patch(TASKRUNS, "ns", "tr", intent, content_type=APPLY_PATCH,
                                    force=True))
    assert is_conflict(error) and "uid mismatch" in error.message
    assert kube.stored(TASKRUNS, "tr") is None
    # A merge patch of no object is a 404, whatever it names.
    assert is_not_found(await raised(kube.patch(TASKRUNS, "ns", "tr", intent)))
    # The control: without a uid, the apply creates it (status dropped, as a create does).
    created = await kube.patch(TASKRUNS, "ns", "tr", {**intent, "metadata": {"name": "tr"},
                                                      "status": {"s": 1}},
                               content_type=APPLY_PATCH, force=True)
    assert created["spec"] == {"status": "TaskRunCancelled"} and "status" not in created
    assert created["metadata"]["uid"] not in (None, old["metadata"]["uid"])
    assert [e["type"] for e in kube.events(TASKRUNS)] == ["ADDED", "DELETED", "ADDED"]


@pytest.mark.parametrize("subresource", ["", "status"])
async def test_a_put_naming_another_uid_is_a_conflict_as_on_the_api_server(
        subresource: str) -> None:
    """A PUT's uid is its precondition: another uid is a 409 Conflict ("Precondition
    failed: UID in precondition"), checked before the resourceVersion; so is a delete's."""
    kube = FakeKube()
    old, new = await namesake(kube)
    # The stale uid, with the namesake's own resourceVersion: the uid alone refuses it.
    put = {**new, "metadata": {**new["metadata"], "uid": old["metadata"]["uid"]},
           "spec": {"a": 1}, "status": {"s": 1}}
    error = await raised(kube.put(BUILDRUNS, "ns", "br", put, subresource=subresource))
    assert is_conflict(error) and "UID in precondition" in error.message
    error = await raised(kube.delete(BUILDRUNS, "ns", "br",
                                     preconditions={"uid": old["metadata"]["uid"]}))
    assert is_conflict(error) and "UID in precondition" in error.message
    assert kube.stored(BUILDRUNS, "br") == new  # nothing landed
    # The control: its own uid, and the PUT lands.
    await kube.put(BUILDRUNS, "ns", "br", {**put, "metadata": new["metadata"]},
                   subresource=subresource)
    assert kube.stored(BUILDRUNS, "br") != new


@pytest.mark.parametrize("write", ["put", "put status", "merge patch", "apply", "delete"])
async def test_a_stale_resource_version_is_a_conflict_as_on_the_api_server(write: str) -> None:
    """A resourceVersion in a PUT's or a patch's body, or a delete's preconditions, other
    than the stored one: 409 Conflict, nothing landed."""
    kube = FakeKube()
    read = kube.add(BUILDRUNS, {"metadata": {"name": "br"}, "spec": {}})
    moved = kube.modify(BUILDRUNS, "br", lambda obj: obj.update(spec={"b": 2}))
    stale = {"resourceVersion": read["metadata"]["resourceVersion"],
             "uid": read["metadata"]["uid"]}  # its own uid: only the version is stale
    body = {**read, "metadata": {**read["metadata"], **stale}, "spec": {"a": 1},
            "status": {"s": 1}}
    calls: dict[str, Callable[[], Awaitable[JSON]]] = {
        "put": lambda: kube.put(BUILDRUNS, "ns", "br", body),
        "put status": lambda: kube.put(BUILDRUNS, "ns", "br", body, subresource="status"),
        "merge patch": lambda: kube.patch(BUILDRUNS, "ns", "br", body),
        "apply": lambda: kube.patch(BUILDRUNS, "ns", "br", body, content_type=APPLY_PATCH,
                                    force=True),
        "delete": lambda: kube.delete(BUILDRUNS, "ns", "br", preconditions=stale)}
    call = calls[write]
    error = await raised(call())
    assert is_conflict(error) and "the object has been modified" in error.message
    assert kube.stored(BUILDRUNS, "br") == moved
    # The control: the current version, and it lands.
    now = {**stale, "resourceVersion": moved["metadata"]["resourceVersion"]}
    body["metadata"].update(now)
    stale.update(now)
    await call()
    assert kube.stored(BUILDRUNS, "br") != moved


async def test_every_change_is_a_watch_event_in_resource_version_order() -> None:
    kube = FakeKube()
    added = kube.add(BUILDRUNS, {"metadata": {"name": "br"}})
    kube.modify(BUILDRUNS, "br", lambda obj: obj.update(spec={"a": 1}))  # the test's own
    current = await kube.get(BUILDRUNS, "ns", "br")
    await kube.put(BUILDRUNS, "ns", "br", {**current, "status": {"s": 1}},
                   subresource="status")
    await kube.delete(BUILDRUNS, "ns", "br")
    again = await kube.create(BUILDRUNS, "ns", {"metadata": {"name": "br"}})
    kube.add(TASKRUNS, {"metadata": {"name": "tr"}})
    events = kube.events(BUILDRUNS)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED", "ADDED"]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert events[0]["object"] == added and events[2]["object"]["status"] == {"s": 1}
    assert events[3]["object"]["status"] == {"s": 1}  # the last state, at a version of its own
    assert events[4]["object"]["metadata"]["uid"] == again["metadata"]["uid"]
    assert kube.events(BUILDRUNS, 3) == events[3:] and kube.events(BUILDRUNS, 1, 2) == [events[1]]
    assert kube.event_count(BUILDRUNS) == 5
    assert [e["type"] for e in kube.events(TASKRUNS)] == ["ADDED"]
    events[0]["object"]["spec"] = "changed"  # a copy: the history stays as it was
    assert kube.events(BUILDRUNS)[0]["object"] == added
    peeked = kube.peek(BUILDRUNS, "br")
    assert peeked == again and peeked is kube.peek(BUILDRUNS, "br")  # itself, no copy
    await kube.patch(BUILDRUNS, "ns", "br", {"metadata": {"labels": {"a": "b"}}})
    assert kube.peek(BUILDRUNS, "br") is not peeked and peeked == again  # a new one stored


async def test_a_landed_failure_takes_effect_and_still_raises() -> None:
    kube = FakeKube()
    read = kube.add(BUILDRUNS, {"metadata": {"name": "br"}})
    kube.fail("put", BUILDRUNS, status=504, reason="Timeout", landed=True, subresource="status")
    error = await raised(kube.put(BUILDRUNS, "ns", "br", {**read, "status": {"s": 1}},
                                  subresource="status"))
    assert (error.status, error.reason) == (504, "Timeout")
    assert kube.stored(BUILDRUNS, "br")["status"] == {"s": 1}  # type: ignore[index]
    seen: list[Call] = []
    kube.after("create", TASKRUNS, seen.append)
    await kube.create(TASKRUNS, "ns", {"metadata": {"name": "tr"}})
    assert seen == [("create", "taskruns", "tr", "")]
    kube.fail("get", BUILDRUNS, times=None)
    kube.fail("get", BUILDRUNS, times=None, landed=True)
    kube.clear_hooks()  # the faults stop
    assert (await kube.get(BUILDRUNS, "ns", "br"))["status"] == {"s": 1}


async def test_admission_sees_every_client_write_as_a_webhook_would() -> None:
    kube = FakeKube()
    checked: list[tuple[str, JSON | None]] = []

    def no_updates_once_done(verb: str, stored: JSON | None, new: JSON) -> None:
        checked.append((verb, stored))
        if stored is not None and stored.get("status") == "done" and \
                stored.get("spec") != new.get("spec"):
            raise ApiError(400, "BadRequest", "no updates are allowed")

    def default_timeout(verb: str, stored: JSON | None, new: JSON) -> None:
        new["spec"].setdefault("timeout", "1h0m0s")

    kube.admit(TASKRUNS, no_updates_once_done)
    kube.admit(TASKRUNS, default_timeout)
    created = await kube.create(TASKRUNS, "ns", {"metadata": {"name": "tr"}, "spec": {}})
    assert created["spec"] == {"timeout": "1h0m0s"}  # mutated, and answered so
    await kube.patch(TASKRUNS, "ns", "tr", {"spec": {"a": 1}})
    kube.modify(TASKRUNS, "tr", lambda obj: obj.update(status="done"))  # not checked
    refused = await raised(kube.patch(TASKRUNS, "ns", "tr", {"spec": {"a": 2}}))
    assert refused.status == 400
    assert kube.stored(TASKRUNS, "tr")["spec"] == {"a": 1, "timeout": "1h0m0s"}  # type: ignore[index]
    await kube.patch(TASKRUNS, "ns", "tr", {"metadata": {"labels": {"x": "y"}}})
    assert [verb for verb, _ in checked] == ["create", "patch", "patch", "patch"]
    assert checked[0][1] is None


async def test_another_writers_write_makes_ours_conflict() -> None:
    kube = FakeKube()
    read = kube.add(BUILDRUNS, {"metadata": {"name": "br"}})
    kube.modify(BUILDRUNS, "br", lambda obj: obj.setdefault("status", {"by": "them"}))
    body = {"metadata": {"resourceVersion": read["metadata"]["resourceVersion"]}, "status": {}}
    assert is_conflict(await raised(kube.patch(BUILDRUNS, "ns", "br", body,
                                               subresource="status")))
    assert kube.calls == [("patch", "buildruns", "br", "status")]  # modify is not logged

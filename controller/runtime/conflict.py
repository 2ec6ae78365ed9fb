"""Optimistic concurrency for one write: client-go's `retry.RetryOnConflict`, with the
re-read built in, and writes pinned to the object they were decided on.

A write carries the resourceVersion it was worked out from, so the API server refuses
it with 409 Conflict when someone wrote in between. The answer is never to force the
write, but to read the object again and work the change out anew from what is there
now: `write` is handed the fresh object (None once it is gone) and decides again.

A name is not an object: one deleted and created again under its name (scripts do
`delete` then `apply`) is another object, with another uid. A write decided on one must
never land on the other (issue 39: a BuildRun recreated while a reconcile of the old one
was in flight took the old one's verdict). So the re-read hands over None, "gone", when
the name holds another uid (`reread`), and a write that carries no resourceVersion names
the uid instead (`pinned`), which the API server then holds it to.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random

from controller.runtime.errors import is_conflict, is_invalid, is_not_found
from controller.runtime.kube import APPLY_PATCH, JSON, MERGE_PATCH, ApiError, Kube, Resource

T = TypeVar("T")

# client-go's retry.DefaultRetry takes 5 steps 10 ms apart (with jitter); ours are
# 0-50 ms apart, so writers racing on one object do not retry in step.
CONFLICT_TRIES = 5
CONFLICT_WAIT = 0.05


async def reread(kube: Kube, resource: Resource, obj: JSON) -> JSON | None:
    """`obj` as the API server holds it now; None when it is gone, including when its name
    now holds another object (another uid: a namesake created since)."""
    meta = obj["metadata"]
    current = await kube.get_or_none(resource, meta.get("namespace"), meta["name"])
    if current is None or current["metadata"].get("uid") != meta.get("uid"):
        return None
    return current


def pinned(obj: JSON, patch: JSON) -> JSON:
    """`patch` (a merge, strategic merge or apply patch of `obj`) with obj's uid in its
    metadata. The API server holds the patched object to it: on another object of the
    same name the patch would change the uid, which it refuses (422, "metadata.uid:
    field is immutable"; a PUT whose body names another uid is a 409). Measured against
    the API server: tests/cluster/test_namesakes.py. (Every object the API server hands
    out has a uid; one without, made by a unit test, is patched unpinned.)"""
    uid = obj["metadata"].get("uid")
    if not uid:
        return patch
    return {**patch, "metadata": {**(patch.get("metadata") or {}), "uid": uid}}


async def patch_pinned(kube: Kube, resource: Resource, obj: JSON, patch: JSON, *,
                       content_type: str = MERGE_PATCH, force: bool = False) -> JSON | None:
    """Patches `obj`, and only it (`pinned`): the patched object, or None when obj is gone
    or its name holds another object by now. Any other error is raised as it came.

    The API server says "gone" three ways: 404; 422 "metadata.uid: field is immutable" on
    a namesake; and, to a server-side apply (which would otherwise create the object),
    409 "uid mismatch: the provided object specified uid ..., and no existing object was
    found". Those 422s and 409s are taken as gone only when a re-read says so, so a real
    refusal is raised as it came; a merge patch's 409 is a resourceVersion conflict,
    raised at once (retry_on_conflict reads again)."""
    meta = obj["metadata"]
    try:
        return await kube.patch(resource, meta.get("namespace"), meta["name"],
                                pinned(obj, patch), content_type=content_type, force=force)
    except ApiError as exc:
        maybe_gone = is_invalid(exc) or (is_conflict(exc) and content_type == APPLY_PATCH)
        if is_not_found(exc) or (maybe_gone and await reread(kube, resource, obj) is None):
            return None
        raise


async def retry_on_conflict(
    kube: Kube, resource: Resource, obj: JSON, write: Callable[[JSON | None], Awaitable[T]]
) -> T:
    """`write(obj)`; after each 409 Conflict, `write` again with the object read anew
    (None when it is gone, or replaced by a namesake: `reread`), up to CONFLICT_TRIES
    tries. Any other error, and the last conflict, is raised as it came."""
    try:
        # The first try outside tenacity: nearly every write meets no conflict, and
        # setting up its retry loop was 4.5% of the controller's time in a burst of
        # finishes (py-spy, issue 34).
        return await write(obj)
    except Exception as exc:
        if not is_conflict(exc):
            raise
    await asyncio.sleep(random.uniform(0, CONFLICT_WAIT))  # as tenacity spaces the rest
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(is_conflict), stop=stop_after_attempt(CONFLICT_TRIES - 1),
        wait=wait_random(0, CONFLICT_WAIT), reraise=True,
    ):
        with attempt:
            return await write(await reread(kube, resource, obj))
    raise AssertionError("unreachable: tenacity reraises the last error")

"""`buildrun-controller migrate-storage`: Kubernetes' storage version migration for the
four Shipwright CRDs, so a cluster that once stored v1alpha1 (Shipwright before v0.12)
can take our CRDs, which serve v1beta1 only.

Run while Shipwright's CRDs and its conversion webhook still serve (its controller may
be stopped). For each CRD whose `status.storedVersions` lists more than v1beta1, every
object is read as v1beta1 and written back unchanged: the API server stores what it
writes in the storage version, v1beta1 (an object already stored so is rewritten too,
harmless; a write that changes nothing in storage is not even made). Then v1alpha1 is
dropped from `storedVersions`, the step the API server waits for before it accepts a
CRD without it. A CRD that lists only v1beta1 is left alone, so a second run does
nothing. Patching `storedVersions` without the rewrite is no shortcut: on the API
server (tests/cluster/test_storage_versions.py), once our CRDs are on, an object still
stored as v1alpha1 answers 500 "request to convert CR from an invalid group/version" and
the list of its kind 429 "storage is (re)initializing", to every client.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

from controller.commands.runner import CommandError, with_kube
from controller.runtime.errors import is_conflict, is_gone, is_not_found
from controller.runtime.kube import JSON, ApiError, Kube, Resource
from controller.shipwright.crds import CRDS, KINDS, MIGRATE, SERVED, crd_name

PROG = MIGRATE
DESCRIPTION = ("Rewrite every Build, BuildRun, BuildStrategy and ClusterBuildStrategy as "
               f"{SERVED} and drop older versions from their CRDs' status.storedVersions "
               "(Kubernetes' storage version migration), while Shipwright's CRDs and "
               "conversion webhook still serve. Idempotent.")
CHUNK_SIZE = 500  # objects per list request, as kubectl's --chunk-size


class MigrationError(CommandError):
    """One line: why a CRD cannot be migrated (nothing of it was changed after the cause);
    the command exits 1."""


def stale_versions(crd: JSON) -> list[str]:
    """The versions besides v1beta1 that objects of `crd` may still be stored as."""
    stored = (crd.get("status") or {}).get("storedVersions") or []
    return [str(v) for v in stored if v != SERVED]


def blocker(crd: JSON) -> str | None:
    """Why `crd`'s objects cannot be rewritten as v1beta1 now; None when they can."""
    name = crd["metadata"]["name"]
    versions = (crd.get("spec") or {}).get("versions") or []
    served = [v["name"] for v in versions if v.get("served")]
    storage = [v["name"] for v in versions if v.get("storage")]
    if SERVED not in served:
        return (f"CRD {name} does not serve {SERVED} (it serves {', '.join(served) or 'none'}): "
                f"install Shipwright v0.12 or later (its CRDs and webhook) first")
    if storage != [SERVED]:
        return (f"CRD {name} stores {', '.join(storage) or 'nothing'}, not {SERVED}: a "
                f"rewrite would store it again; install Shipwright v0.12 or later first")
    return None


def _conversion(crd: JSON) -> str:
    return str(((crd.get("spec") or {}).get("conversion") or {}).get("strategy") or "None")


async def rewrite_all(kube: Kube, kind: Resource, chunk_size: int = CHUNK_SIZE) -> int:
    """Writes every object of `kind` back as read (as v1beta1); how many were written or
    found rewritten by someone else meanwhile."""
    written, token = 0, ""
    while True:
        query: dict[str, str | int] = {"limit": chunk_size}
        if token:
            query["continue"] = token
        try:
            page = await kube.list(kind, None, **query)
        except ApiError as exc:
            again = f"; run {PROG} again" if is_gone(exc) else ""  # the continue token expired
            raise MigrationError(f"cannot list them as {SERVED}: {exc.status} "
                                 f"{exc.message}{again}") from exc
        # One write at a time, gentle on the API server: 2,000 BuildRuns took 21 s against
        # the local one (2026-12-04, 2 cores, load 3-4).
        for obj in page.get("items") or []:
            meta = obj["metadata"]
            try:
                await kube.put(kind, meta.get("namespace"), meta["name"], obj)
            except ApiError as exc:
                if is_not_found(exc):
                    continue  # deleted since the list: nothing left to migrate
                if not is_conflict(exc):
                    key = "/".join(filter(None, (meta.get("namespace"), meta["name"])))
                    raise MigrationError(f"cannot write {key} back: {exc.status} "
                                         f"{exc.message}") from exc
                # Written since the list, so written in the storage version: migrated.
                # (kube-storage-version-migrator reads a conflict the same way.)
            written += 1
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return written


async def migrate_one(kube: Kube, kind: Resource, say: Callable[[str], None],
                      chunk_size: int = CHUNK_SIZE) -> None:
    """Migrates one CRD's objects and storedVersions, saying what it did in one line."""
    name = crd_name(kind)
    crd = await kube.get_or_none(CRDS, None, name)
    if crd is None:
        say(f"{name}: not installed; nothing to do")
        return
    stale = stale_versions(crd)
    if not stale:
        say(f"{name}: storedVersions is already [{SERVED}]; nothing to do")
        return
    reason = blocker(crd)
    if reason is not None:
        raise MigrationError(reason)
    try:
        count = await rewrite_all(kube, kind, chunk_size)
    except MigrationError as exc:
        hint = (" (Shipwright's conversion webhook must run while migrating)"
                if _conversion(crd) == "Webhook" and "conversion webhook" in str(exc) else "")
        raise MigrationError(f"{name}: {exc}{hint}; storedVersions left as "
                             f"{crd['status']['storedVersions']}") from exc
    old = crd["status"]["storedVersions"]
    try:
        # The CRD's resourceVersion as a precondition: had its storage version changed
        # while the objects were rewritten, they might not all be stored as v1beta1.
        await kube.patch(CRDS, None, name, {
            "metadata": {"resourceVersion": crd["metadata"]["resourceVersion"]},
            "status": {"storedVersions": [SERVED]}}, subresource="status")
    except ApiError as exc:
        if is_conflict(exc):
            raise MigrationError(f"{name}: the CRD changed while its objects were rewritten; "
                                 f"storedVersions left as {old}: run {PROG} again") from exc
        raise MigrationError(f"{name}: cannot set status.storedVersions: "
                             f"{exc.status} {exc.message}") from exc
    say(f"{name}: rewrote {count} object(s) as {SERVED}; storedVersions "
        f"{old} -> ['{SERVED}']")


async def migrate(kube: Kube, out: TextIO, chunk_size: int = CHUNK_SIZE) -> None:
    """All four CRDs, in turn; the first that cannot be migrated stops it (the ones before
    it stay migrated, and a second run skips them)."""
    for kind in KINDS:
        await migrate_one(kube, kind, lambda line: print(f"{PROG}: {line}", file=out),
                          chunk_size)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command's arguments, on the `migrate-storage` subcommand of controller/cli.py's
    parser."""
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else "
                   "$KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context to use")
    p.add_argument("--chunk-size", type=int, default=CHUNK_SIZE, metavar="N",
                   help=f"objects per list request (default {CHUNK_SIZE})")
    return p


async def command(args: argparse.Namespace, out: TextIO) -> int:
    """The command: 0 migrated (or nothing to do), 1 a CRD cannot be migrated, 2 bad
    settings or no API server (runner.py); what it did on `out`, the one-line cause on
    stderr."""

    async def body(kube: Kube) -> int:
        await migrate(kube, out, getattr(args, "chunk_size", CHUNK_SIZE))
        return 0

    return await with_kube(PROG, args, body)

"""The Build reconciler: look up what validation needs, validate, write the verdict.

What the verdict is lives in `validation.validate` (pure); this module only reads
the API server (referenced Secrets, the strategy) and writes `status.registered`,
`status.reason` and `status.message`, always through `_write_status`, the only
Build status writer. As in Shipwright, a Build is never changed otherwise and a
deleted Build needs nothing. It also keeps the Build an owner of its BuildRuns exactly
while `spec.retention.atBuildDeletion` is true.
"""

from __future__ import annotations

import logging
import socket

import aiohttp

from controller.builds.validation import (
    CLUSTER_STRATEGY,
    Lookups,
    Verdict,
    owner_references,
    owns_its_buildruns,
    repository_probe,
    secret_refs,
    strategy_ref,
    validate,
)
from controller.runtime.controller import DONE, Result
from controller.runtime.errors import RetryableError, is_not_found
from controller.runtime.kube import JSON, SECRETS, ApiError, Kube
from controller.runtime.store import Store
from controller.shipwright import metrics
from controller.shipwright.forbidden_env import NO_FORBIDDEN_ENV, ForbiddenEnvNames
from controller.shipwright.indexes import BY_BUILD, BY_BUILD_OWNER
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
)

log = logging.getLogger(__name__)

# How long the verify.repository probe of a Git remote may take.
PROBE_TIMEOUT_SECONDS = 10.0
# Bytes of a refusing Git server's answer quoted in the message (go-git quotes it all).
PROBE_BODY_MAX = 512


class BuildReconciler:
    def __init__(self, kube: Kube, builds: Store, strategies: Store,
                 buildruns: Store, forbidden_env: ForbiddenEnvNames = NO_FORBIDDEN_ENV) -> None:
        """`buildruns` is indexed by "build" (the key of the Build a BuildRun names);
        `forbidden_env` is FORBIDDEN_ENV_VAR_NAMES, read at start."""
        self.kube = kube
        self.builds = builds
        self.strategies = strategies
        self.buildruns = buildruns
        self.forbidden_env = forbidden_env

    async def reconcile(self, key: str) -> Result:
        build = self.builds.get(key)
        if build is None:
            return DONE  # deleted: nothing to do, as in Shipwright
        verdict = validate(build, await self._look_up(build))
        await self._write_status(build, verdict)
        await self._sync_owners(build, key)
        if verdict.registered:
            # Shipwright counts every reconcile that finds a Build valid: on spec changes
            # (generation) and on a referenced Secret's creation or deletion (setup.py).
            strategy = strategy_ref(build).name
            metrics.build_registered(strategy, build["metadata"]["namespace"],
                                     build["metadata"]["name"])
        # No timer for a missing Secret: its creation wakes the Build (setup.py).
        return DONE

    async def give_up(self, key: str, error: RetryableError) -> Result:
        """The retry budget is spent (the API server kept failing the look-ups or the
        write): the Build keeps its last status; its next change validates it again."""
        log.warning("gave up validating Build; its status is left as it was",
                    extra={"key": key, "error": str(error)})
        return DONE

    async def _look_up(self, build: JSON) -> Lookups:
        namespace = build["metadata"]["namespace"]
        missing = frozenset([name for name in secret_refs(build)
                             if await self.kube.get_or_none(SECRETS, namespace, name) is None])
        ref = strategy_ref(build)
        strategy = None
        if ref.known and ref.name:
            if ref.kind == CLUSTER_STRATEGY:
                strategy = await self.kube.get_or_none(CLUSTERBUILDSTRATEGIES, None, ref.name)
            else:
                strategy = self.strategies.get(f"{namespace}/{ref.name}") or (
                    await self.kube.get_or_none(BUILDSTRATEGIES, namespace, ref.name))
        url, repository_error = repository_probe(build)
        if url is not None:
            repository_error = await self._probe(url)
        return Lookups(missing, strategy, repository_error, self.forbidden_env)

    @staticmethod
    async def _probe(url: str) -> str | None:
        """Asks a Git remote for its refs as go-git does; None when it answers 2xx, else
        the error go-git would give (a 401 reads as unreachable, as Shipwright says)."""
        try:
            async with aiohttp.ClientSession(
                trust_env=True, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_SECONDS)
            ) as session, session.get(url) as resp:
                if 200 <= resp.status < 300:
                    return None
                body = (await resp.content.read(PROBE_BODY_MAX)).decode(errors="replace")
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            return probe_error(url, exc)
        if resp.status == 401:
            return "remote repository unreachable"
        if resp.status == 403:
            return f"authorization failed: {body}"
        if resp.status == 404:
            return f"repository not found: {body}"
        return f'unexpected client error: unexpected requesting "{url}" status code: {resp.status}'

    async def _sync_owners(self, build: JSON, key: str) -> None:
        """retention.atBuildDeletion set or unset: add or remove the Build as owner of
        each of its BuildRuns (Shipwright's ownerreferences step). Shipwright logs and
        ignores a failure here; this raises it, so the reconcile is retried.

        Only the BuildRuns whose owners must change are read: with it set, those not
        owned by the Build yet; unset, those still owned (two indexes; usually none).
        Reading all of a Build's BuildRuns held the event loop for 0.9-2.8 s with 20,000
        cached (finished ones are decoded on read), and every reconcile with it, the new
        BuildRun's first among them, at each restart (issue 34)."""
        named = self.buildruns.index_keys(BY_BUILD, key)
        owned = self.buildruns.index_keys(BY_BUILD_OWNER, key)
        for buildrun_key in sorted(named - owned if owns_its_buildruns(build) else named & owned):
            buildrun = self.buildruns.get(buildrun_key)
            if buildrun is None:
                continue
            refs = owner_references(build, buildrun)
            if refs is None:
                continue
            meta = buildrun["metadata"]
            try:
                await self.kube.patch(BUILDRUNS, meta["namespace"], meta["name"], {
                    "metadata": {"ownerReferences": refs,
                                 "resourceVersion": meta["resourceVersion"]}})
            except ApiError as exc:
                if not is_not_found(exc):
                    raise

    async def _write_status(self, build: JSON, verdict: Verdict) -> JSON | None:
        """The one Build status writer. Writes only a change; carries the resourceVersion
        read, so a write based on a stale Build fails with a conflict and is retried
        (as Shipwright's Status().Update); None when nothing was written."""
        wanted = verdict.status()
        current = build.get("status") or {}
        if all(current.get(k) == v for k, v in wanted.items()):
            return None
        meta = build["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": wanted}
        try:
            return await self.kube.patch(BUILDS, meta["namespace"], meta["name"], body,
                                         subresource="status")
        except ApiError as exc:
            if is_not_found(exc):
                return None  # deleted meanwhile
            raise


def probe_error(url: str, exc: BaseException) -> str:
    """The error go-git's HTTP client reports for a probe that got no answer, in Go's
    words where they differ from aiohttp's: a host name that does not resolve is Go's
    "no such host" (Shipwright's integration suite looks for those words)."""
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error,
                                                                     socket.gaierror):
        return f'Get "{url}": dial tcp: lookup {exc.host}: no such host'
    return f'Get "{url}": {str(exc) or type(exc).__name__}'


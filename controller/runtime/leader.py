"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

A candidate takes the lease when it is free or its holder has not renewed it
for `lease_duration`, measured on *our* clock from when we last saw the record
change (never by comparing the holder's timestamps with ours, which may be
skewed). The leader renews every `retry_period`; if it cannot renew within
`renew_deadline` it has lost, and must stop reconciling at once, because
another replica may take over `lease_duration` after the last renewal.

Every write is a PUT carrying the resourceVersion read (or written) last, so of
two candidates only one wins. Time is the event loop's clock (monotonic).

A Lease edited by hand into an odd shape never crashes a replica: a missing or
non-object spec counts as empty, a holder that is not a string as a foreign
holder, a leaseDurationSeconds that is not a positive number as ours. Any
failure is logged with its class from `errors.classify` and retried.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable

from controller.runtime import metrics, timestamps
from controller.runtime.errors import RetryableError, classify, is_not_found
from controller.runtime.kube import JSON, LEASES, ApiError, Kube
from controller.runtime.settings import LeaderElectionSettings

log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    pass


class LeaderElector:
    def __init__(self, kube: Kube, settings: LeaderElectionSettings) -> None:
        self.kube = kube
        self.s = settings
        self._observed: JSON | None = None  # the Lease spec last seen (or written)
        self._observed_at = 0.0  # loop time when it last changed
        self._lease: JSON | None = None  # the Lease as we last wrote it
        self._gauge = metrics.LEADER_STATUS.labels(settings.name)
        self._gauge.set(0)

    async def acquire(self) -> None:
        """Returns once this replica holds the lease."""
        # Polling every retry_period is the protocol: there is nothing to wait on. A
        # standby keeps trying through API server outages, as client-go's does.
        while True:
            try:
                if await self._try_acquire_or_renew():
                    break
            except Exception as exc:
                self._log_failure("could not acquire lease, retrying", exc)
            await asyncio.sleep(self.s.retry_period)
        self._gauge.set(1)
        log.info("acquired lease", extra={"lease": self.s.name, "identity": self.s.identity})

    async def hold(self) -> None:
        """Renews until it cannot within renew_deadline; then raises LeadershipLost."""
        last_renew = _now()
        while True:
            await asyncio.sleep(self.s.retry_period)
            try:
                if await self._try_acquire_or_renew():
                    last_renew = _now()
                    continue
            except Exception as exc:  # any failure to renew counts against the deadline
                self._log_failure("lease renewal failed", exc)
            if _now() - last_renew >= self.s.renew_deadline:
                self._gauge.set(0)
                raise LeadershipLost(f"could not renew lease {self.s.name} within "
                                     f"{self.s.renew_deadline}s")

    async def release(self) -> None:
        """Hands the lease over at once on a clean shutdown (client-go ReleaseOnCancel)."""
        self._gauge.set(0)
        lease = self._lease
        if lease is None or _holder(_spec(lease)) != self.s.identity:
            return
        _spec(lease).update(holderIdentity="", leaseDurationSeconds=1,
                            renewTime=timestamps.format_micro_time(timestamps.now()))
        try:
            await self.kube.put(LEASES, self.s.namespace, self.s.name, lease)
        except Exception as exc:
            self._log_failure("could not release lease", exc)

    async def _try_acquire_or_renew(self) -> bool:
        now = timestamps.format_micro_time(timestamps.now())
        try:
            lease = await self.kube.get(LEASES, self.s.namespace, self.s.name)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            return await self._create(now)
        spec = _spec(lease)
        holder = _holder(spec)
        if spec != self._observed:
            self._observed, self._observed_at = copy.deepcopy(spec), _now()
        duration = _duration(spec, self.s.lease_duration)
        if holder and holder != self.s.identity and _now() - self._observed_at < duration:
            return False
        if holder != self.s.identity:
            spec["leaseTransitions"] = _count(spec.get("leaseTransitions")) + 1
            spec["acquireTime"] = now
        spec.update(
            holderIdentity=self.s.identity,
            leaseDurationSeconds=int(self.s.lease_duration),
            renewTime=now,
        )
        return await self._claim(self.kube.put(LEASES, self.s.namespace, self.s.name, lease))

    async def _create(self, now: str) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.s.name, "namespace": self.s.namespace},
            "spec": {
                "holderIdentity": self.s.identity,
                "leaseDurationSeconds": int(self.s.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        return await self._claim(self.kube.create(LEASES, self.s.namespace, body))

    async def _claim(self, write: Awaitable[JSON]) -> bool:
        """Awaits a create or update of the lease naming us; a 409 means another won."""
        try:
            self._lease = await write
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        self._observed, self._observed_at = copy.deepcopy(_spec(self._lease)), _now()
        return True

    def _log_failure(self, message: str, exc: Exception) -> None:
        error = classify(exc)
        error_class = error.error_class if isinstance(error, RetryableError) else "terminal"
        log.warning(message, exc_info=error_class == "unexpected", extra={
            "lease": self.s.name, "error_class": error_class, "error": str(exc)})


def _now() -> float:
    return asyncio.get_running_loop().time()


def _spec(lease: JSON) -> JSON:
    """The Lease's spec, as a dict that edits write back; a missing or malformed one
    (null, a list, a string) is replaced by an empty one."""
    if not isinstance(lease, dict):
        raise ValueError(f"the Lease is not an object: {type(lease).__name__}")
    spec = lease.get("spec")
    if not isinstance(spec, dict):
        spec = lease["spec"] = {}
    return spec


def _holder(spec: JSON) -> str:
    """The holder's identity; "" when free. A holder that is not a string is nobody we
    know, so it counts as another replica (which waits a lease duration)."""
    holder = spec.get("holderIdentity")
    if holder is None or isinstance(holder, str):
        return holder or ""
    return repr(holder)


def _count(value: object) -> int:
    """leaseTransitions as written, or 0 when it is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _duration(spec: JSON, default: float) -> float:
    """The holder's leaseDurationSeconds, or ours when it is not a positive number."""
    value = spec.get("leaseDurationSeconds")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default

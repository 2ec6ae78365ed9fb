"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules, made so
that two replicas never reconcile at once.

A candidate takes the lease when it is free or its holder has not renewed it
for `lease_duration`, measured on *our* clock from when we last saw the record
change (never by comparing the holder's timestamps with ours, which may be
skewed). Every write is a PUT carrying the resourceVersion read (or written)
last, so of two candidates only one wins.

The leader's invariant: it stops leading at `renewed_at + renew_deadline` at the
latest, where `renewed_at` is when it *sent* its last write that succeeded.
The server applied that write after it was sent, and a standby saw it after
that, so no standby can take over before `renewed_at + lease_duration`; the
difference (lease_duration - renew_deadline > 0, checked at start-up) is the
time the leader has to cancel its reconciles. So no request may outlive the
deadline: each try is cancelled when it comes (`asyncio.timeout_at`), and a
stalled request counts as a failed renewal. Unbounded, one stalled GET or PUT
waited out the client's 30 s timeout: with the default durations a standby took
the Lease 16.0 s after a stall while the old leader exited only at 31.8 s; in
tests/cluster/test_partition.py (lease 4 s, renew 3 s, retry 1 s) 3.9 s and
31.3 s. Bounded, the old leader exits 2.8 s after the stall, the standby
takes the Lease at 3.9 s.

The leader renews every `retry_period` with one PUT of the Lease it last wrote
(client-go's optimistic fast path), falling back to GET-then-PUT on a conflict.
It keeps the lease while a renewal's round trip fits in the time left, i.e.
while about twice the round trip is under renew_deadline (a renewal can only be
sent once the previous one has answered). It gives up at once on seeing
another holder.

A Lease edited by hand into an odd shape never crashes a replica: a missing or
non-object spec counts as empty, a holder that is not a string as a foreign
holder, a leaseDurationSeconds that is not a positive number as ours. Every
failure is logged with its class from `errors.classify` and retried.

Time is the event loop's clock (monotonic), which `asyncio.timeout_at` uses too.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
from collections.abc import Awaitable
from typing import NoReturn

from controller.runtime import metrics, timestamps
from controller.runtime.conflict import retry_on_conflict
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
        # Written into the Lease: whole seconds, rounded up so that a standby never
        # waits less than the lease_duration the leader's safety margin assumes.
        self._lease_seconds = math.ceil(settings.lease_duration)
        self._observed: JSON | None = None  # the Lease spec last seen (or written)
        self._observed_at = 0.0  # loop time when it last changed
        self._lease: JSON | None = None  # the Lease as we last wrote it
        self._renewed_at = 0.0  # loop time our last successful write was sent
        self._gauge = metrics.LEADER_STATUS.labels(settings.name)
        self._gauge.set(0)

    async def acquire(self) -> None:
        """Returns once this replica holds the lease."""
        # Polling every retry_period is the protocol: there is nothing to wait on. A
        # standby keeps trying through API server outages, as client-go's does. A try
        # is bounded too: a claim that answered later than renew_deadline after it
        # was sent would leave the new leader no time to renew.
        while True:
            if await self._try(_now() + self.s.renew_deadline, "could not acquire lease"):
                break
            await asyncio.sleep(self.s.retry_period)
        self._gauge.set(1)
        log.info("acquired lease", extra={"lease": self.s.name, "identity": self.s.identity})

    async def hold(self) -> None:
        """Renews every retry_period until it cannot by the renew deadline (see the module
        docstring), or sees another holder; then raises LeadershipLost at once."""
        tried_at = self._renewed_at
        while True:
            deadline = self._renewed_at + self.s.renew_deadline
            await asyncio.sleep(max(0.0, min(tried_at + self.s.retry_period, deadline) - _now()))
            if _now() >= deadline:
                self._lose(f"could not renew lease {self.s.name} within {self.s.renew_deadline}s")
            tried_at = _now()
            if await self._try(deadline, "lease renewal failed"):
                continue
            holder = _holder(self._observed or {})
            if holder not in ("", self.s.identity):
                self._lose(f"lease {self.s.name} is held by {holder}")

    async def release(self) -> None:
        """Hands the lease over at once on a clean shutdown (client-go ReleaseOnCancel).

        Our copy may be one write behind: stopping cancels `hold`, and a renewal it had
        sent may have been written without our hearing the answer (seen in CI: the PUT
        met a 409 and the lease stayed held for its whole duration). So a conflict
        reads the Lease again and frees it if it still names us, never another."""
        self._gauge.set(0)
        if self._lease is None or _holder(_spec(self._lease)) != self.s.identity:
            return

        async def free(lease: JSON | None) -> None:
            if lease is None or _holder(_spec(lease)) != self.s.identity:
                return
            _spec(lease).update(holderIdentity="", leaseDurationSeconds=1,
                                renewTime=timestamps.format_micro_time(timestamps.now()))
            await self.kube.put(LEASES, self.s.namespace, self.s.name, lease)

        try:
            await retry_on_conflict(self.kube, LEASES, self._lease, free)
        except Exception as exc:
            self._log_failure("could not release lease", exc)

    def _lose(self, reason: str) -> NoReturn:
        self._gauge.set(0)
        raise LeadershipLost(reason)

    async def _try(self, deadline: float, failure: str) -> bool:
        """One try to acquire or renew, cancelled at loop time `deadline`; True if the
        lease is ours. A failure of any kind (a timeout included) is logged, not raised."""
        try:
            async with asyncio.timeout_at(deadline):
                return await self._try_acquire_or_renew()
        except Exception as exc:
            self._log_failure(failure, exc)
            return False

    async def _try_acquire_or_renew(self) -> bool:
        now = timestamps.format_micro_time(timestamps.now())
        if self._lease is not None and _holder(_spec(self._lease)) == self.s.identity:
            # Fast path: we wrote the Lease last, so PUT our copy; a conflict means
            # someone else wrote since, and the slow path reads what they wrote.
            lease = copy.deepcopy(self._lease)
            _spec(lease).update(renewTime=now, leaseDurationSeconds=self._lease_seconds)
            if await self._claim(self.kube.put(LEASES, self.s.namespace, self.s.name, lease)):
                return True
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
            leaseDurationSeconds=self._lease_seconds,
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
                "leaseDurationSeconds": self._lease_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        return await self._claim(self.kube.create(LEASES, self.s.namespace, body))

    async def _claim(self, write: Awaitable[JSON]) -> bool:
        """Awaits a create or update of the lease naming us; a 409 means another won.
        On success the lease is ours from when the write was sent (`_renewed_at`)."""
        sent = _now()
        try:
            self._lease = await write
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        self._renewed_at = sent
        self._observed, self._observed_at = copy.deepcopy(_spec(self._lease)), _now()
        return True

    def _log_failure(self, message: str, exc: Exception) -> None:
        error = classify(exc)
        error_class = error.error_class if isinstance(error, RetryableError) else "terminal"
        log.warning(message, exc_info=error_class == "unexpected", extra={
            "lease": self.s.name, "error_class": error_class, "error": str(exc) or repr(exc)})


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

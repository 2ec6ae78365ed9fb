"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

A candidate takes the lease when it is free or its holder has not renewed it
for `lease_duration`, measured on *our* clock from when we last saw the record
change (never by comparing the holder's timestamps with ours, which may be
skewed). The leader renews every `retry_period`; if it cannot renew within
`renew_deadline` it has lost, and must stop reconciling at once, because
another replica may take over `lease_duration` after the last renewal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

from controller.runtime import metrics, timestamps
from controller.runtime.errors import is_not_found
from controller.runtime.kube import JSON, LEASES, ApiError, Kube
from controller.runtime.settings import LeaderElectionSettings

log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    pass


class LeaderElector:
    def __init__(self, kube: Kube, settings: LeaderElectionSettings) -> None:
        self.kube = kube
        self.s = settings
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._lease: JSON | None = None
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
                log.warning("could not acquire lease, retrying", extra={"error": str(exc)})
            await asyncio.sleep(self.s.retry_period)
        self._gauge.set(1)
        log.info("acquired lease", extra={"lease": self.s.name, "identity": self.s.identity})

    async def hold(self) -> None:
        """Renews until it cannot within renew_deadline; then raises LeadershipLost."""
        last_renew = time.monotonic()
        while True:
            await asyncio.sleep(self.s.retry_period)
            try:
                if await self._try_acquire_or_renew():
                    last_renew = time.monotonic()
                    continue
            except Exception as exc:  # any failure to renew counts against the deadline
                log.warning("lease renewal failed", extra={"error": str(exc)})
            if time.monotonic() - last_renew >= self.s.renew_deadline:
                self._gauge.set(0)
                raise LeadershipLost(f"could not renew lease {self.s.name} within "
                                     f"{self.s.renew_deadline}s")

    async def release(self) -> None:
        """Hands the lease over at once on a clean shutdown (client-go ReleaseOnCancel)."""
        self._gauge.set(0)
        lease = self._lease
        if lease is None or lease["spec"].get("holderIdentity") != self.s.identity:
            return
        lease["spec"].update(holderIdentity="", leaseDurationSeconds=1,
                             renewTime=timestamps.format_micro_time(timestamps.now()))
        try:
            await self.kube.request("PUT", LEASES.path(self.s.namespace, self.s.name), body=lease)
        except Exception as exc:
            log.warning("could not release lease", extra={"error": str(exc)})

    async def _try_acquire_or_renew(self) -> bool:
        now = timestamps.format_micro_time(timestamps.now())
        try:
            lease = await self.kube.get(LEASES, self.s.namespace, self.s.name)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            return await self._create(now)
        spec = lease.setdefault("spec", {})
        holder = spec.get("holderIdentity") or ""
        record = (holder, str(spec.get("renewTime")))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.s.lease_duration)
        if holder and holder != self.s.identity and (
            time.monotonic() - self._observed_at < duration
        ):
            return False
        if holder != self.s.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = now
        spec.update(
            holderIdentity=self.s.identity,
            leaseDurationSeconds=int(self.s.lease_duration),
            renewTime=now,
        )
        # PUT carries resourceVersion: of two candidates, only one wins.
        return await self._claim(
            self.kube.request("PUT", LEASES.path(self.s.namespace, self.s.name), body=lease), now
        )

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
        return await self._claim(self.kube.create(LEASES, self.s.namespace, body), now)

    async def _claim(self, write: Awaitable[JSON], now: str) -> bool:
        """Awaits a create or update of the lease naming us; a 409 means another won."""
        try:
            self._lease = await write
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        self._observed, self._observed_at = (self.s.identity, now), time.monotonic()
        return True

"""The generic runtime's knobs: the work queue's backoff, the retry budget, leader election.

`controller.settings` composes these with the process's own knobs into `Settings`
and re-exports them, so every knob is defined in one of the two settings modules
and imported from `controller.settings`. They live here, not there, because the
runtime may not import the process wiring (tests/unit/test_layering.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.runtime.kube import ConfigError


@dataclass(frozen=True)
class QueueSettings:
    """client-go's DefaultControllerRateLimiter: max(per-item exponential, overall bucket)."""

    base_delay: float = 0.005
    max_delay: float = 1000.0
    qps: float = 10.0
    burst: int = 100
    jitter: float = 0.0


@dataclass(frozen=True)
class RetryBudget:
    """How long a key may keep failing with system errors; 0 means no limit."""

    max_retries: int = 15
    max_age: float = 900.0


# client-go's wait.JitterFactor for leader election: a retry may come up to 1.2 retry
# periods after the last, so the renew deadline must leave room for more than one.
JITTER_FACTOR = 1.2


@dataclass(frozen=True)
class LeaderElectionSettings:
    """Which Lease to hold, as whom, and client-go's three durations (seconds).

    Refused at construction, as client-go's NewLeaderElector refuses them, unless
    lease_duration > renew_deadline > retry_period * JITTER_FACTOR > 0: the leader
    must give up (renew_deadline after its last renewal) before a standby may take
    over (lease_duration after it), and must get more than one try in between.
    """

    namespace: str
    name: str = "buildrun-controller"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        durations = (self.lease_duration, self.renew_deadline, self.retry_period)
        if not all(d > 0 and math.isfinite(d) for d in durations):
            raise ConfigError(
                "leader election: lease duration, renew deadline and retry period must be "
                f"positive seconds (got {_seconds(self.lease_duration)}, "
                f"{_seconds(self.renew_deadline)}, {_seconds(self.retry_period)})")
        if self.lease_duration <= self.renew_deadline:
            raise ConfigError(
                f"leader election: the lease duration ({_seconds(self.lease_duration)}) must be "
                f"longer than the renew deadline ({_seconds(self.renew_deadline)}), or a "
                "standby may take over while the leader still reconciles")
        if self.renew_deadline <= self.retry_period * JITTER_FACTOR:
            raise ConfigError(
                f"leader election: the renew deadline ({_seconds(self.renew_deadline)}) must be "
                f"longer than {JITTER_FACTOR} x the retry period "
                f"({_seconds(self.retry_period)})")


def _seconds(value: float) -> str:
    return f"{value:g}s" if math.isfinite(value) else str(value)

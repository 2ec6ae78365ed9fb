"""The generic runtime's knobs: the work queue's backoff, the retry budget, leader election.

`controller.settings` composes these with the process's own knobs into `Settings`
and re-exports them, so every knob is defined in one of the two settings modules
and imported from `controller.settings`. They live here, not there, because the
runtime may not import the process wiring (tests/unit/test_layering.py).
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class LeaderElectionSettings:
    """Which Lease to hold, as whom, and client-go's three durations (seconds)."""

    namespace: str
    name: str = "buildrun-controller"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

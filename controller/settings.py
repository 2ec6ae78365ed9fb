"""Every knob the controller has, as dataclasses; the CLI fills them in."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.runtime.leader import LeaderElectionSettings
from controller.runtime.reconcile import RetryBudget


@dataclass(frozen=True)
class QueueSettings:
    """client-go's DefaultControllerRateLimiter: max(per-item exponential, overall bucket)."""

    base_delay: float = 0.005
    max_delay: float = 1000.0
    qps: float = 10.0
    burst: int = 100
    jitter: float = 0.0


@dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None  # None watches all namespaces
    workers: int = 4
    reconcile_timeout: float | None = 60.0
    resync_period: float | None = None
    metrics_address: str = ":8080"
    probe_address: str = ":8081"
    shutdown_grace: float = 30.0
    queue: QueueSettings = field(default_factory=QueueSettings)
    budget: RetryBudget = field(default_factory=RetryBudget)
    leader_election: LeaderElectionSettings | None = None

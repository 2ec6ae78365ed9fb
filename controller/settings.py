"""Every knob the controller has, as dataclasses; the CLI fills them in.

The generic runtime's knobs (queue backoff, retry budget, leader election) are
defined in `controller.runtime.settings`, which the runtime may import, and
re-exported here with the process-level `Settings` that composes them: import
any of them from this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.runtime.kube import ConfigError
from controller.runtime.podlogs import READ_LIMIT
from controller.runtime.settings import LeaderElectionSettings, QueueSettings, RetryBudget

__all__ = ["LeaderElectionSettings", "LogSnippetSettings", "QueueSettings", "RetryBudget",
           "Settings"]


@dataclass(frozen=True)
class LogSnippetSettings:
    """--failure-log-snippet: a failed step's last lines in its BuildRun's Warning Event
    (controller/buildrun/snippets.py), at most `lines` lines and `max_bytes` bytes of them.
    Refused at construction unless both are positive and `max_bytes` is within what one
    read asks for (podlogs.READ_LIMIT)."""

    lines: int = 20
    max_bytes: int = 2048

    def __post_init__(self) -> None:
        if self.lines < 1 or not 1 <= self.max_bytes <= READ_LIMIT:
            raise ConfigError(
                "--failure-log-lines must be at least 1 and --failure-log-bytes from 1 to "
                f"{READ_LIMIT} (got {self.lines} and {self.max_bytes})")


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
    # Seconds past Tekton's own timeout (or after a cancel was asked: the same wait for the
    # same Tekton) before the BuildRun gives up on a run Tekton never
    # ended (its controller down or stuck): Tekton ends a timed-out run itself
    # (TaskRunTimeout), 0 s after it in whole seconds on the stack (test_tekton's timeout
    # test), so a minute is room for a Tekton controller that restarts.
    timeout_grace: float = 60.0
    # Seconds a BuildRun's TaskRun may wait to run (from its creation until Tekton reports
    # it Running) before the BuildRun ends BuildRunPendingTimeout; None: no limit (the
    # default, as Shipwright, whose BuildRun waits until its own timeout). A BuildRun's or
    # Build's annotation (annotations.PENDING_TIMEOUT) wins over it.
    pending_timeout: float | None = None
    queue: QueueSettings = field(default_factory=QueueSettings)
    budget: RetryBudget = field(default_factory=RetryBudget)
    leader_election: LeaderElectionSettings | None = None
    # Issue 43 part 3 (controller/buildrun/retries.py): how often a run the infrastructure
    # failed is run again when neither the BuildRun nor its Build says (0: off, as
    # Shipwright), and the delay before the first retry, doubled for each one after.
    infrastructure_retries: int = 0
    infrastructure_retry_delay: float = 10.0
    # Shipwright main's SetOwnerReferenceFailed (#2252): a BuildRun another object
    # controls fails when its Build has retention.atBuildDeletion; v0.20.13 runs it.
    fail_on_owner_conflict: bool = False
    # None: off (the default). A log may hold what the Event's readers should not see.
    log_snippet: LogSnippetSettings | None = None

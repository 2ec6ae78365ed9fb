"""Controller metrics, named and bucketed as controller-runtime registers them.

Dashboards and alerts written for controller-runtime controllers work
unchanged. The workqueue_* families live in the workqueue package; process_*
and python_* come from prometheus-client's default collectors.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
)
TERMINAL_RECONCILE_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
)
RECONCILE_PANICS = Counter(
    "controller_runtime_reconcile_panics_total",
    "Total number of reconciliation panics (unexpected exceptions) per controller",
    ["controller"],
)
# controller-runtime's since v0.23: reconciles cancelled by the reconcile timeout (ours,
# --reconcile-timeout), counted when that limit fired, not an API request's timeout.
RECONCILE_TIMEOUTS = Counter(
    "controller_runtime_reconcile_timeouts_total",
    "Total number of reconciliation timeouts per controller",
    ["controller"],
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=[
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
        0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15,
        20, 25, 30, 40, 50, 60,
    ],
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ["controller"],
)
RETRY_BUDGET_EXHAUSTED = Counter(
    "controller_retry_budget_exhausted_total",
    "Keys whose retry budget ran out, handed to the reconciler's give-up path",
    ["controller"],
)
LEADER_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 "
    "indicates master. 'name' is the string used to identify the lease.",
    ["name"],
)

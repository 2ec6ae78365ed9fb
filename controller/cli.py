"""`python -m controller` / `buildrun-controller`: flags in, one clear line out on bad setup.

With no command it runs the controller; `history NAMESPACE/NAME` prints one
BuildRun's history (controller/commands/history.py) instead, and `migrate-storage`
rewrites Shipwright's objects as v1beta1 (controller/commands/migrate.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import uuid
from pathlib import Path

import uvloop

from controller import app
from controller.buildrun.annotations import INFRASTRUCTURE_RETRIES, PENDING_TIMEOUT
from controller.buildrun.retries import MAX_RETRIES
from controller.commands import history, migrate, runner
from controller.runtime import logs
from controller.runtime.kube import ConfigError
from controller.settings import (
    LeaderElectionSettings,
    LogSnippetSettings,
    QueueSettings,
    RetryBudget,
    Settings,
)

log = logging.getLogger("controller")

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _optional_seconds(text: str) -> float | None:
    value = float(text)
    return value if value > 0 else None


def _retries(text: str) -> int:
    """--infrastructure-retries: a whole number from 0 to retries.MAX_RETRIES."""
    if not text.strip().isdigit() or int(text) > MAX_RETRIES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to "
                                         f"{MAX_RETRIES}")
    return int(text)


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="buildrun-controller",
        description="Runs Shipwright BuildRuns as Tekton TaskRuns, one try each; the flags "
        "below configure it. `buildrun-controller history NAMESPACE/NAME` prints a BuildRun's "
        "history instead.",
    )
    d, q, b = Settings(), QueueSettings(), RetryBudget()
    lease = LeaderElectionSettings(namespace="")  # only its defaults are read here
    conn = p.add_argument_group("connection")
    conn.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else "
                      "$KUBECONFIG or ~/.kube/config)")
    conn.add_argument("--context", help="kubeconfig context to use")
    conn.add_argument("--namespace", help="watch only this namespace (default: all)")

    run = p.add_argument_group("reconciling")
    run.add_argument("--max-concurrent-reconciles", type=int, default=d.workers, metavar="N")
    run.add_argument("--reconcile-timeout", type=_optional_seconds, default=d.reconcile_timeout,
                     metavar="SECONDS", help="cancel a reconcile after this long; 0 disables")
    run.add_argument("--resync-period", type=_optional_seconds, default=None, metavar="SECONDS",
                     help="replay every cached object this often; 0 (default) disables")
    run.add_argument("--timeout-grace", type=float, default=d.timeout_grace, metavar="SECONDS",
                     help="seconds Tekton gets to end a run past its timeout, or after a "
                     "cancel, before the BuildRun ends without it")
    run.add_argument("--pending-timeout", type=_optional_seconds, default=d.pending_timeout,
                     metavar="SECONDS", help="end a BuildRun whose TaskRun has not run this "
                     "long after its creation (BuildRunPendingTimeout); 0 (default) "
                     f"disables; a BuildRun's or Build's annotation {PENDING_TIMEOUT} wins")
    run.add_argument("--fail-on-owner-conflict", action="store_true",
                     help="fail a BuildRun another object controls (an ownerReference with "
                     "controller: true) when its Build has retention.atBuildDeletion, with "
                     "SetOwnerReferenceFailed, as Shipwright's main does (#2252); by default "
                     "it runs, as in Shipwright v0.20.13")
    run.add_argument("--shutdown-grace-period", type=float, default=d.shutdown_grace,
                     metavar="SECONDS")
    run.add_argument("--infrastructure-retries", type=_retries,
                     default=d.infrastructure_retries, metavar="N",
                     help="run a TaskRun the infrastructure failed (pod evicted or deleted, "
                     "node lost, image pull timed out) again up to N times; 0 (default) is "
                     "off; a BuildRun's or Build's annotation "
                     f"{INFRASTRUCTURE_RETRIES} wins")
    run.add_argument("--infrastructure-retry-delay", type=_positive_seconds,
                     default=d.infrastructure_retry_delay, metavar="SECONDS",
                     help="delay before the first such retry, doubled for each after it")

    back = p.add_argument_group("backoff and retry budget (defaults = client-go's)")
    back.add_argument("--backoff-base-delay", type=float, default=q.base_delay, metavar="SECONDS")
    back.add_argument("--backoff-max-delay", type=float, default=q.max_delay, metavar="SECONDS")
    back.add_argument("--backoff-jitter", type=float, default=q.jitter, metavar="FRACTION",
                      help="add up to this fraction of each delay at random (default 0: off)")
    back.add_argument("--rate-limit-qps", type=float, default=q.qps)
    back.add_argument("--rate-limit-burst", type=int, default=q.burst)
    back.add_argument("--max-retries", type=int, default=b.max_retries, metavar="N",
                      help="system-error retries per BuildRun before it fails; 0: no limit")
    back.add_argument("--max-retry-duration", type=float, default=b.max_age, metavar="SECONDS",
                      help="time from the first system error before it fails; 0: no limit")

    srv = p.add_argument_group("endpoints")
    srv.add_argument("--metrics-bind-address", default=d.metrics_address,
                     help="host:port for /metrics; 0 disables")
    srv.add_argument("--health-probe-bind-address", default=d.probe_address,
                     help="host:port for /healthz and /readyz; 0 disables")

    le = p.add_argument_group("leader election")
    le.add_argument("--leader-elect", action="store_true")
    le.add_argument("--leader-election-namespace",
                    help="default: the pod's namespace in-cluster, else 'default'")
    le.add_argument("--leader-election-id", default=lease.name)
    le.add_argument("--lease-duration", type=float, default=lease.lease_duration,
                    metavar="SECONDS")
    le.add_argument("--renew-deadline", type=float, default=lease.renew_deadline,
                    metavar="SECONDS")
    le.add_argument("--retry-period", type=float, default=lease.retry_period,
                    metavar="SECONDS")

    snippet = p.add_argument_group(
        "failure log snippet (off by default: a log may hold what readers of Events should "
        "not see)")
    snippet.add_argument("--failure-log-snippet", action="store_true",
                         help="put a failed step's last log lines in the BuildRun's Warning "
                         "Event (needs get on pods/log: manifests/rbac/pod_logs.yaml)")
    snippet.add_argument("--failure-log-lines", type=int, default=LogSnippetSettings.lines,
                         metavar="N", help="at most this many lines")
    snippet.add_argument("--failure-log-bytes", type=int,
                         default=LogSnippetSettings.max_bytes, metavar="BYTES",
                         help="at most this many bytes of them, from the end")

    out = p.add_argument_group("logging")
    out.add_argument("--log-level", default="info",
                     choices=["debug", "info", "warning", "error"])
    out.add_argument("--log-format", default="json", choices=["json", "text"])

    # Optional: without a command the controller runs, as it always has.
    commands = p.add_subparsers(dest="command", title="commands", metavar="COMMAND",
                                description="Without a command the controller runs.")
    history.add_arguments(commands.add_parser(
        "history", prog=history.PROG, help=history.DESCRIPTION, description=history.DESCRIPTION,
        # Unset options stay unset in the command's namespace, so a --kubeconfig or
        # --context given before `history` is used rather than reset to its default.
        argument_default=argparse.SUPPRESS,
    ))
    migrate.add_arguments(commands.add_parser(
        "migrate-storage", prog=migrate.PROG, help=migrate.DESCRIPTION,
        description=migrate.DESCRIPTION, argument_default=argparse.SUPPRESS,
    ))
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    leader = None
    if args.leader_elect:
        namespace = args.leader_election_namespace or (
            _SA_NAMESPACE.read_text().strip() if _SA_NAMESPACE.is_file() else "default"
        )
        leader = LeaderElectionSettings(
            namespace=namespace,
            name=args.leader_election_id,
            identity=f"{socket.gethostname()}_{uuid.uuid4()}",
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    return Settings(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        workers=args.max_concurrent_reconciles,
        reconcile_timeout=args.reconcile_timeout,
        resync_period=args.resync_period,
        metrics_address=args.metrics_bind_address,
        probe_address=args.health_probe_bind_address,
        shutdown_grace=args.shutdown_grace_period,
        timeout_grace=args.timeout_grace,
        pending_timeout=args.pending_timeout,
        queue=QueueSettings(
            base_delay=args.backoff_base_delay, max_delay=args.backoff_max_delay,
            qps=args.rate_limit_qps, burst=args.rate_limit_burst, jitter=args.backoff_jitter,
        ),
        budget=RetryBudget(max_retries=args.max_retries, max_age=args.max_retry_duration),
        leader_election=leader,
        infrastructure_retries=args.infrastructure_retries,
        infrastructure_retry_delay=args.infrastructure_retry_delay,
        fail_on_owner_conflict=args.fail_on_owner_conflict,
        log_snippet=LogSnippetSettings(args.failure_log_lines, args.failure_log_bytes)
        if args.failure_log_snippet else None,
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "history":
        return runner.run(history.history, args)
    if args.command == "migrate-storage":
        return runner.run(migrate.command, args)
    logs.setup(args.log_level, args.log_format)
    try:
        settings = settings_from(args)  # refuses hostile durations with a ConfigError
        identity = settings.leader_election.identity if settings.leader_election else (
            f"{socket.gethostname()}_{os.getpid()}")
        # uvloop's event loop (asyncio's API, libuv under it): its transports and TLS
        # cost less than the standard loop's, a fifth of the controller's CPU per start.
        # Measured back to back (BENCHMARKS.md, "Throughput"): 163 and 165 starts/s
        # against 156 and 156 (1.80 against 1.95 ms of controller CPU per start).
        return uvloop.run(app.run(settings, identity))
    except ConfigError as exc:
        print(f"buildrun-controller: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

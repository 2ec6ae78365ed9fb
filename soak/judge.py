"""How the fault soak (soak.run) is judged: what its own watch saw of every BuildRun
(Recorder), what the run did to the world and when (Timeline), and the verdict on all of
it once the run is over (judge), in a Report: the four invariants that must hold (lost,
flipped, duplicated, wrong) and the retries accounting, each as `python -m soak.run
--help` defines it for the reader of the report; the retries left unlogged are broken
down by soak.accounting.

The judge reads, never acts: it makes no call to the cluster, so the same evidence
always gives the same report (tests/unit/soak/test_judge.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.buildrun import reasons
from controller.runtime.kube import JSON
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.labels import LABEL_BUILDRUN
from soak import accounting
from soak.actors import AttributedWebhook, SecondWriter
from soak.plan import DOOMED, Plan
from soak.replicas import LogSummary, ReplicaSet, Sample, summarize_log
from soak.watch import Follower, Seen

# TaskRun reasons Tekton gives when it could not make the pod: an API server restart in
# the middle of the pod create is one (Tekton's handlePodCreationError fails the TaskRun
# for any error it does not know). The BuildRun then rightly ends with Tekton's reason, as
# Shipwright's does.
TEKTON_POD_FAILURES = ("PodCreationFailed", "PodAdmissionFailed")


Terminal = tuple[str, str, str]


@dataclass
class Track:
    states: int = 0
    terminal: Terminal | None = None
    last: JSON | None = None
    flips: list[str] = field(default_factory=list)
    deleted: bool = False


class Recorder:
    """Every BuildRun state the soak's own watch sees; flags any change to an outcome."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}

    def on_object(self, kind: Seen, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        track = self.tracks.setdefault(name, Track())
        if kind == "DELETED":
            track.deleted = True
            return
        track.states += 1
        track.last = obj
        cond = (succeeded_condition(obj.get("status")) or {})
        now = ((obj.get("status") or {}).get("completionTime") or "",
               str(cond.get("status")), str(cond.get("reason")))
        if track.terminal is None:
            if now[0]:
                track.terminal = now
        elif now != track.terminal:
            track.flips.append(f"{track.terminal} -> {now} "
                               f"(resourceVersion {obj['metadata'].get('resourceVersion')})")

    def done(self, name: str) -> bool:
        track = self.tracks.get(name)
        return track is not None and track.terminal is not None


@dataclass
class Report:
    config: dict[str, Any]
    workdir: str
    seconds: float = 0.0
    created: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    flipped: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    exhausted_mixed: list[str] = field(default_factory=list)
    tekton_failed: list[str] = field(default_factory=list)
    retries: dict[str, Any] = field(default_factory=dict)
    peak_rss_mib: dict[str, float] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.flipped or self.duplicated or self.wrong)

    def text(self) -> str:
        c = self.config
        f = self.faults
        r = self.retries
        lines = [
            f"soak: {self.created} BuildRuns, seed {c['seed']}, {self.seconds:.1f} s, "
            f"2 replicas, max-retries {c['max_retries']}; logs in {self.workdir}",
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items())),
            f"faults: apiserver restarts {f['apiserver_restarts']} "
            f"(down {f['apiserver_down_mean']:.1f} s mean, {f['apiserver_down_max']:.1f} s max); "
            f"replica kills {f['kills']} ({f['kills_leader']} of the leader; "
            f"{f['kills_by_signal']}); replica processes {f['incarnations']} "
            f"(exit codes {f['exit_codes']}); label patches {f['label_patches']} "
            f"({f['label_patches_unfinished']} on unfinished BuildRuns); "
            f"webhook calls {f['webhook_calls']} {f['webhook_verdicts']}; "
            f"Tekton webhook stops {f['tekton_webhook_stops']} "
            f"(down {f['tekton_webhook_down_mean']:.1f} s mean); Tekton controller kills "
            f"{f['tekton_controller_kills']}; leader stalls {f['leader_stalls']} "
            f"({f['leader_stalls_left']} stalled leaders exited; "
            f"{f['leader_stalls_no_leader']} found no leader to stall); "
            f"pods given a fate {f['pods_with_fate']}",
            f"api server answered: {f['apiserver_requests']} (status_conflicts: status "
            "updates refused 409 Conflict; taskrun_already_exists: creates of a TaskRun that "
            "existed, adopted)",
            f"lost: {len(self.lost)}",
            f"flipped: {len(self.flipped)}",
            f"duplicated: {len(self.duplicated)}",
            f"wrong: {len(self.wrong)}",
            f"  of the planned outcomes, {len(self.tekton_failed)} ended with Tekton's reason "
            "because Tekton "
            f"failed their TaskRun itself ({', '.join(TEKTON_POD_FAILURES)}: it could not make "
            "the pod, e.g. the API server restarted mid-create); the controller reported "
            "Tekton's outcome, so these are right, and listed below",
            f"  of {self.reasons.get('ReconcilerRetriesExhausted', 0)} ReconcilerRetriesExhausted, "
            f"{len(self.exhausted_mixed)} spent part of their budget on other system errors "
            "(API server restarts), which the budget counts too (right by the controller's "
            "contract, listed below; wrong by the stricter webhook-failures-only rule)",
            f"retries: buildrun_retries_total {r['metric_total']} {r['metric_by_class']} "
            f"vs webhook failures {r['webhook_failures']} + {r['tekton_webhook_refused']}: "
            f"difference (failures - webhook retries) {r['difference']}",
        ]
        lines += [f"  {line}" for line in r["explained"]]
        lines.append("peak RSS of each replica slot (largest process_resident_memory_bytes "
                     "scraped, every second, over its processes): " + ", ".join(
                         f"slot {k} {v:.1f} MiB" for k, v in sorted(self.peak_rss_mib.items())))
        h = self.health
        lines.append(
            f"health: reconcile panics {h['panics']}, tracebacks in logs {h['tracebacks']}, "
            f"fatal stops {h['fatal']}, lost leases {h['leadership_lost']}, "
            f"non-JSON log lines {h['unstructured']}, reconciles {h['reconciles']}, "
            f"stack {h.get('stack', '?')}"
        )
        for title, items in (("lost", self.lost), ("flipped", self.flipped),
                             ("duplicated", self.duplicated), ("wrong", self.wrong),
                             ("exhausted with other system errors", self.exhausted_mixed),
                             ("failed by Tekton", self.tekton_failed),
                             ("traceback", h.get("traceback_samples", [])),
                             ("fatal stop", [f[:200] for f in h.get("fatal_samples", [])]),
                             ("non-JSON log line", h.get("unstructured_samples", []))):
            for item in items[:20]:
                lines.append(f"  {title}: {item}")
            if len(items) > 20:
                lines.append(f"  {title}: ... and {len(items) - 20} more")
        lines.append("result: " + ("OK" if self.ok else "INVARIANT BROKEN"))
        return "\n".join(lines)


@dataclass
class Timeline:
    """What the run did to the world and when (monotonic seconds), and what the API
    server counted (scraped before each restart, whose process takes its counters along,
    and at the end). The run fills it in; the judge reads it; timeline.json keeps it, with
    the webhook's calls and the replicas' processes, for soak.accounting."""

    # The timeline is in monotonic seconds, the replicas' logs in wall-clock ones.
    wall_minus_monotonic: float
    apiserver_kills: list[float] = field(default_factory=list)
    apiserver_down: list[float] = field(default_factory=list)  # seconds, each restart
    # (time, slot, signal, leader)
    kills: list[tuple[float, int, str, bool]] = field(default_factory=list)
    # (stopped at, seconds)
    tekton_webhook_down: list[tuple[float, float]] = field(default_factory=list)
    tekton_controller_kills: list[float] = field(default_factory=list)
    # (time, slot, leader left)
    leader_stalls: list[tuple[float, int, bool]] = field(default_factory=list)
    leader_stalls_missed: int = 0  # no leader to stall at that moment
    apiserver_counts: Counter[str] = field(default_factory=Counter)
    apiserver_scrapes_missed: int = 0


@dataclass(frozen=True)
class Evidence:
    """Everything the judge weighs, handed over by the run once it is over."""

    plan: Plan
    seen: Recorder
    created: int  # BuildRuns the run created
    timeline: Timeline
    taskruns: list[JSON]  # every TaskRun in the soak's namespace at the end
    webhook: AttributedWebhook
    pods_with_fate: int  # pods the fate webhook was asked about
    replicas: ReplicaSet
    writer: SecondWriter
    watch: Follower


def judge(report: Report, e: Evidence) -> None:
    """Fills `report` in from the evidence: the four invariants (lost, flipped,
    duplicated, wrong), the outcomes, the faults, the retries accounting and the
    replicas' health."""
    taskruns, webhook, replicas, t = e.taskruns, e.webhook, e.replicas, e.timeline
    report.created = e.created
    budget = e.plan.cfg.max_retries + 1  # the first try and max_retries retries

    by_owner: dict[str, list[str]] = {}
    for tr in taskruns:
        meta = tr["metadata"]
        owner = next((o["name"] for o in meta.get("ownerReferences") or []
                      if o.get("kind") == "BuildRun" and o.get("controller")), None)
        by_owner.setdefault(owner or f"(no owner) {meta['name']}", []).append(meta["name"])
    report.duplicated = [f"{owner}: {names}" for owner, names in sorted(by_owner.items())
                         if len(names) > 1]
    # What Tekton itself decided for each BuildRun's TaskRun.
    tekton_says: dict[str, JSON] = {}
    for tr in taskruns:
        owner = (tr["metadata"].get("labels") or {}).get(LABEL_BUILDRUN, "")
        tekton_says[owner] = succeeded_condition(tr.get("status")) or {}

    logs = {i.log: summarize_log(i.log) for i in replicas.incarnations}
    exhausted_mixed: list[str] = []  # see _exhausted_wrongly
    reason_counts: Counter[str] = Counter()
    for p in e.plan.runs:
        track = e.seen.tracks.get(p.name)
        if track is None or track.terminal is None:
            last = track and track.last and succeeded_condition(track.last.get("status"))
            report.lost.append(f"{p.name} ({p.kind}): last seen {last or 'nothing'}")
            continue
        report.flipped += [f"{p.name}: {flip}" for flip in track.flips]
        _, status, reason = track.terminal
        reason_counts[reason] += 1
        message = ((succeeded_condition(track.last.get("status")) or {}).get("message")
                   or "")[:200] if track.last else ""
        why = None
        if reason == reasons.RECONCILER_RETRIES_EXHAUSTED:
            why = _exhausted_wrongly(p.name, webhook, logs, budget, message, exhausted_mixed)
        elif reason != p.expected and reason in TEKTON_POD_FAILURES:
            report.tekton_failed.append(
                f"{p.name} ({p.kind}): TaskRun {tekton_says[p.name].get('reason')}: "
                f"{str(tekton_says[p.name].get('message'))[:200]}")
        elif reason != p.expected:
            why = f"{reason} ({status}), expected {p.expected}: {message}"
        elif (status == "True") != (reason == reasons.SUCCEEDED):
            why = f"{reason} with status {status}"
        if why is None and (p.kind.startswith("user:") or p.kind == DOOMED) and (
            p.name in by_owner
        ):
            why = f"has TaskRun(s) {by_owner[p.name]} but should have none"
        if why is not None:
            report.wrong.append(f"{p.name} ({p.kind}): {why}")
    report.reasons = dict(reason_counts)

    verdicts = Counter(webhook.verdicts)
    exits = Counter(str(i.exit_code) for i in replicas.incarnations)
    report.faults = {
        "apiserver_restarts": len(t.apiserver_kills),
        "apiserver_down_mean": (sum(t.apiserver_down) / len(t.apiserver_down)
                                if t.apiserver_down else 0.0),
        "apiserver_down_max": max(t.apiserver_down, default=0.0),
        "kills": len(t.kills),
        "kills_leader": sum(1 for k in t.kills if k[3]),
        "kills_by_signal": dict(Counter(k[2] for k in t.kills)),
        "incarnations": len(replicas.incarnations),
        "exit_codes": dict(exits),
        "label_patches": e.writer.patches,
        "label_patches_unfinished": e.writer.on_unfinished,
        "label_patches_failed": e.writer.failed,
        "apiserver_requests": dict(t.apiserver_counts),
        "apiserver_scrapes_missed": t.apiserver_scrapes_missed,
        "webhook_calls": webhook.calls,
        "webhook_verdicts": dict(verdicts),
        "soak_watch_errors": e.watch.watch_errors,
        "soak_watch_lists": e.watch.lists,
        "tekton_webhook_stops": len(t.tekton_webhook_down),
        "tekton_webhook_down_mean": (
            sum(d for _, d in t.tekton_webhook_down) / len(t.tekton_webhook_down)
            if t.tekton_webhook_down else 0.0),
        "tekton_controller_kills": len(t.tekton_controller_kills),
        "leader_stalls": len(t.leader_stalls),
        "leader_stalls_left": sum(1 for s in t.leader_stalls if s[2]),
        "leader_stalls_no_leader": t.leader_stalls_missed,
        "pods_with_fate": e.pods_with_fate,
    }
    report.peak_rss_mib = {str(slot): round(rss / 2**20, 1)
                           for slot, rss in replicas.peak_rss().items()}
    report.exhausted_mixed = exhausted_mixed
    _retries(report, e, logs)


def _exhausted_wrongly(name: str, webhook: AttributedWebhook, logs: dict[Path, LogSummary],
                       budget: int, message: str, exhausted_mixed: list[str]) -> str | None:
    """Why ReconcilerRetriesExhausted is wrong for `name`, or None if it is right.

    Right means: no webhook call for it was ever allowed (else its TaskRun exists and
    its outcome must be reported), and every process that gave up on it had first seen
    `budget` failed tries in a row (the first try and max-retries retries; in the NEW
    phase every try of a run without a TaskRun fails, so its count of failed tries is
    that run). Where the budget was spent partly on other system errors (an API server
    restart's 503s), the run is right by the controller's contract but not by the
    stricter "every webhook call failed, more than the budget" rule; those are listed
    in `exhausted_mixed`.
    """
    calls = webhook.by_buildrun.get(name, [])
    if "allow" in calls:
        return (f"ReconcilerRetriesExhausted although a webhook call was allowed (its TaskRun "
                f"was created), calls {dict(Counter(calls))}: {message}")
    givers = [s.gave_up[name] for s in logs.values() if name in s.gave_up]
    if not givers:
        return f"ReconcilerRetriesExhausted, but no replica logged spending a budget: {message}"
    for tries in givers:
        if sum(tries.values()) < budget:
            return (f"gave up after {sum(tries.values())} failed tries {dict(tries)}, "
                    f"fewer than the budget of {budget}: {message}")
    if len(calls) < budget:
        exhausted_mixed.append(
            f"{name}: {len(calls)} failed webhook calls and the giving-up replica's tries "
            f"{dict(givers[0])}; last error: {message}")
    return None


def _retries(report: Report, e: Evidence, logs: dict[Path, LogSummary]) -> None:
    """report.retries: buildrun_retries_total against the failed webhook calls, the
    difference broken down from the replicas' logs (soak.accounting)."""
    webhook, replicas, t = e.webhook, e.replicas, e.timeline
    totals = replicas.totals()

    def counter(name: str, **labels: str) -> int:
        key: Sample = (name, tuple(sorted(labels.items())))
        return int(totals.get(key, 0))

    by_class = {dict(k[1])["error_class"]: int(v) for k, v in totals.items()
                if k[0] == "buildrun_retries_total"}
    metric_total = sum(by_class.values())
    metric_webhook = by_class.get("webhook", 0)
    failures = sum(1 for v in webhook.verdicts if v != "allow")
    # Tekton's webhook stopped: the calls the API server failed, as it counted them.
    tekton_refused = (t.apiserver_counts["tekton_webhook_refused_creates"]
                      + t.apiserver_counts["taskrun_patch_500"])
    tekton_logged = sum(s.tekton_webhook_errors for s in logs.values())
    # Not a fault the soak injects: Tekton's webhook refusing a cancel patch on a
    # TaskRun it had just finished; the controller counts it as a webhook retry.
    tekton_refused_logged = sum(s.tekton_refused for s in logs.values())
    tekton_exhausting = sum(s.budget_spent_tekton for s in logs.values())

    logged = sum(s.webhook_errors for s in logs.values())
    exhausting = sum(s.budget_spent_webhook for s in logs.values())
    # Per process: webhook retries its log implies vs what its last scrape showed.
    after_scrape = 0
    after_scrape_by_end: Counter[str] = Counter()
    for inc in replicas.incarnations:
        s = logs[inc.log]
        scraped = inc.scrape.get(("buildrun_retries_total", (("error_class", "webhook"),)), 0)
        gap = (s.webhook_errors + s.tekton_webhook_errors + s.tekton_refused
               - s.budget_spent_webhook - s.budget_spent_tekton) - int(scraped)
        after_scrape += gap
        if gap:
            after_scrape_by_end[inc.signal_sent or f"exit code {inc.exit_code}"] += gap

    # Failed calls no reconcile logged: match each to the logged try that made it, and
    # name what cut the others short (soak.accounting).
    calls, tries, cut = accounting.inputs(
        webhook.log, t.kills,
        [accounting.Process(i.slot, str(i.log), i.ended, bool(i.signal_sent))
         for i in replicas.incarnations],
        {str(k): v for k, v in logs.items()}, t.apiserver_kills,
        t.leader_stalls, t.wall_minus_monotonic)
    unlogged = accounting.unlogged_calls(calls, tries, cut)

    difference = failures + tekton_refused - metric_webhook
    explained = [
        f"{failures} calls to our flaky webhook failed ({dict(Counter(webhook.verdicts))} "
        f"of all calls) and the API server failed {tekton_refused} TaskRun creates and "
        "cancel patches on Tekton's stopped webhook (creates: "
        "apiserver_admission_webhook_rejection_count, calling_webhook_error; patches: "
        "apiserver_request_total PATCH taskruns 500; scraped before every restart); the "
        "replicas' logs show "
        f"{logged} and {tekton_logged} reconciles failing on them",
        f"- {exhausting + tekton_exhausting} of those spent a retry budget "
        f"({exhausting} and {tekton_exhausting}): by design the failure that exhausts "
        "the budget is not a retry (it hands over to give_up; "
        f"controller_retry_budget_exhausted_total, all classes: "
        f"{counter('controller_retry_budget_exhausted_total', controller='buildrun')})",
        f"- {after_scrape} webhook retries were counted by processes after their last scrape "
        f"(their logs show them), by how the process ended: {dict(after_scrape_by_end)}; a "
        "SIGTERMed replica finishes its in-flight reconciles after the scrape taken before "
        "the signal, anything else died before its next scrape",
        f"- {failures - logged} failed calls never reached a reconcile that logged it "
        f"(each failed call matched to the logged try that made it; "
        f"{sum(unlogged.by_cause.values())} left over): {unlogged.summary()}; "
        f"{unlogged.logged_without_call} logged webhook errors had no recorded call",
        f"- {tekton_refused - tekton_logged} failed calls to Tekton's webhook never "
        "reached a reconcile that logged it (the API server counts each call, with no "
        "time to match it to a replica end; a negative figure means logged failures the "
        f"API server's count missed: {t.apiserver_scrapes_missed} scrapes missed)",
        f"- -{tekton_refused_logged}: reconciles whose cancel patch Tekton's webhook "
        "refused (HTTP 400, the TaskRun was already complete), counted as webhook "
        "retries though no fault was injected",
        f"difference {difference} = {exhausting + tekton_exhausting} + {after_scrape} + "
        f"{failures - logged} + {tekton_refused - tekton_logged} - "
        f"{tekton_refused_logged} (the five lines above)",
        f"other classes in buildrun_retries_total are not webhook failures: "
        f"{ {k: v for k, v in by_class.items() if k != 'webhook'} } (API server restarts, "
        "conflicts left after _write_status' own 5 tries)",
    ]
    report.retries = {
        "metric_total": metric_total,
        "metric_by_class": by_class,
        "metric_webhook": metric_webhook,
        "webhook_failures": failures,
        "tekton_webhook_refused": tekton_refused,
        "tekton_webhook_logged": tekton_logged,
        "tekton_webhook_exhausting": tekton_exhausting,
        "tekton_refused_logged": tekton_refused_logged,
        "difference": difference,
        "logged_webhook_errors": logged,
        "budget_exhausting": exhausting,
        "counted_after_last_scrape": after_scrape,
        "counted_after_last_scrape_by_end": dict(after_scrape_by_end),
        "unlogged_failures": failures - logged,
        "unlogged_by_cause": dict(unlogged.by_cause),
        "unlogged_calls": [f"{c.at:.3f} {c.buildrun} {c.verdict}: {why} ({seen})"
                           for c, why, seen in unlogged.calls],
        "retry_budget_exhausted_total": counter("controller_retry_budget_exhausted_total",
                                                controller="buildrun"),
        "buildrun_retry_exhausted_total": counter("buildrun_retry_exhausted_total"),
        "explained": explained,
    }
    tracebacks = [t for s in logs.values() for t in s.tracebacks]
    report.health = {
        "panics": counter("controller_runtime_reconcile_panics_total", controller="buildrun"),
        "tracebacks": len(tracebacks),
        "traceback_samples": tracebacks[:5],
        "fatal": sum(len(s.fatal) for s in logs.values()),
        "fatal_samples": [f for s in logs.values() for f in s.fatal][:5],
        "leadership_lost": sum(s.leadership_lost for s in logs.values()),
        "unstructured": sum(len(s.unstructured) for s in logs.values()),
        "unstructured_samples": [u for s in logs.values() for u in s.unstructured][:10],
        "reconciles": {dict(k[1])["result"]: int(v) for k, v in totals.items()
                       if k[0] == "controller_runtime_reconcile_total"},
    }

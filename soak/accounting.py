"""Which failed webhook calls no reconcile logged, and what cut each one short.

The soak reconciles `buildrun_retries_total` against the calls to its flaky webhook
that failed; a failed call counts as a retry only if the reconcile that made it got
the answer and logged it. Here each failed call is matched to the logged failed try
of the same BuildRun that was running when the webhook saw it (the log line's ts and
duration give the try's span), and each call left over is named by what happened to
the replicas right after it (Cause). Pure functions over the timeline the soak keeps
(monotonic seconds) and the replicas' logs (wall clock, mapped with the timeline's
`wall_minus_monotonic`, or estimated for a timeline saved before it was recorded).

    .venv/bin/python -m soak.accounting /tmp/tekton-soak-5000   # a saved soak's workdir
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from soak.replicas import LogSummary, summarize_log

Cause = Literal["replica_end", "leader_stall", "apiserver_kill", "lease_lost",
                "tekton_webhook", "unexplained"]
# In the order the report lists them; each reads after "N failed calls were ...".
CAUSES: dict[Cause, str] = {
    "replica_end": "in flight when a replica process ended (killed, or exited)",
    "leader_stall": "in flight when the leader's proxy stalled: the answer was held, and "
                    "the reconcile cancelled when that replica lost its lease",
    "apiserver_kill": "in flight when the API server was killed (the reconcile logged a "
                      "connection error instead, or was cancelled when the outage cost its "
                      "replica the lease)",
    "lease_lost": "cancelled when a replica lost its lease with no stall or kill (a "
                  "renewal the loaded API server did not answer within the renew deadline)",
    "tekton_webhook": "made by a create that Tekton's stopped webhook failed too: the API "
                      "server answered with Tekton's failure, which the reconcile logged",
    "unexplained": "with none of these nearby",
}

# The API server may call the webhook this long after the replica sent the create:
# after a SIGKILL of the sender (up to 0.39 s later on the recorded 5,000-BuildRun run,
# load 9-25), or after its replica had cancelled its reconciles on a lost lease (0.80 s).
LAG = 1.0
# A cut-off counts up to this long after the call: the webhook answers within its 1 s
# timeout, and a stalled leader gives up its lease within the soak's 3 s renew deadline
# (2.7-3.4 s after the call on the recorded run).
REACH = 5.0
# The logs' clock mapped to the timeline's may be off by this much (the estimate's
# bounds were 7 ms apart on the recorded run).
SLACK = 0.05


@dataclass(frozen=True)
class Call:
    """A call to the flaky webhook that failed: when (monotonic), for which BuildRun."""

    at: float
    buildrun: str
    verdict: str


@dataclass(frozen=True)
class Try:
    """A failed reconcile a replica logged, in the timeline's clock."""

    buildrun: str
    kind: str  # as LogSummary.errors_by_name: webhook, tekton-webhook, tekton-refused, other
    start: float
    end: float

    def covers(self, at: float) -> bool:
        return self.start - SLACK <= at <= self.end + SLACK


@dataclass(frozen=True)
class Cutoffs:
    """What may cut a reconcile short, in the timeline's clock; slots are replica slots."""

    replica_ends: Sequence[tuple[float, int]] = ()  # our signal, or an exit as noticed
    lease_losses: Sequence[tuple[float, int]] = ()  # "stopping at once", from the logs
    apiserver_kills: Sequence[float] = ()
    leader_stalls: Sequence[tuple[float, int]] = ()  # when the stall began, whose proxy


@dataclass
class Unlogged:
    by_cause: Counter[Cause] = field(default_factory=Counter)
    calls: list[tuple[Call, Cause, str]] = field(default_factory=list)  # with what was seen
    logged_without_call: int = 0  # webhook failures logged with no failed call to match

    def summary(self) -> str:
        parts = [f"{self.by_cause[c]} {text}" for c, text in CAUSES.items()
                 if self.by_cause[c] or c == "unexplained"]
        return "; ".join(parts)


def match(calls: Iterable[Call], tries: Iterable[Try]) -> tuple[list[Call], int]:
    """(failed calls no logged webhook failure of their BuildRun covers, logged webhook
    failures left with no call). Calls in time order each take the covering try that
    ends first: a try makes one create, so one call."""
    open_tries: dict[str, list[Try]] = defaultdict(list)
    for t in tries:
        if t.kind == "webhook":
            open_tries[t.buildrun].append(t)
    for ts in open_tries.values():
        ts.sort(key=lambda t: t.end)
    unlogged = []
    for call in sorted(calls, key=lambda c: c.at):
        candidates = open_tries.get(call.buildrun, [])
        hit = next((t for t in candidates if t.covers(call.at)), None)
        if hit is None:
            unlogged.append(call)
        else:
            candidates.remove(hit)
    return unlogged, sum(len(ts) for ts in open_tries.values())


def cause(call: Call, tries: Sequence[Try], cut: Cutoffs) -> tuple[Cause, str]:
    """Why `call` (one no webhook failure covers) was not logged, and the evidence:
    another failure of the same try, else the first thing after it that ends a reconcile
    on either replica (the log does not say which replica made the call)."""
    t0 = call.at

    def rel(t: float) -> str:
        return f"{t - t0:+.2f} s"

    for t in tries:
        if t.buildrun != call.buildrun or not t.covers(t0):
            continue
        if t.kind == "tekton-webhook":
            return "tekton_webhook", f"its try ({rel(t.start)} to {rel(t.end)}) failed on " \
                                     "Tekton's webhook"
        kill = next((k for k in cut.apiserver_kills if t0 - LAG <= k <= t.end + SLACK), None)
        if t.kind == "other" and kill is not None:
            return "apiserver_kill", f"API server killed {rel(kill)}; its try logged another " \
                                     f"error at {rel(t.end)}"
    ends = sorted([(t, slot, "end") for t, slot in cut.replica_ends]
                  + [(t, slot, "lease") for t, slot in cut.lease_losses])
    first = next(((t, slot, what) for t, slot, what in ends if t0 - LAG <= t <= t0 + REACH),
                 None)
    if first is None:
        kill = next((k for k in cut.apiserver_kills if t0 - LAG <= k <= t0 + REACH), None)
        if kill is not None:
            return "apiserver_kill", f"API server killed {rel(kill)}"
        return "unexplained", f"nothing within {-LAG:+.1f} to {REACH:+.1f} s"
    at, slot, what = first
    if what == "end":
        return "replica_end", f"replica slot {slot} ended {rel(at)}"
    stall = next((s for s, s_slot in cut.leader_stalls
                  if s_slot == slot and t0 - LAG <= s <= at), None)
    if stall is not None:
        return "leader_stall", f"slot {slot}'s proxy stalled {rel(stall)}, lease lost {rel(at)}"
    kill = next((k for k in cut.apiserver_kills if t0 - LAG <= k <= at), None)
    if kill is not None:
        return "apiserver_kill", f"API server killed {rel(kill)}, slot {slot} lost its " \
                                 f"lease {rel(at)}"
    return "lease_lost", f"slot {slot} lost its lease {rel(at)}"


def unlogged_calls(calls: Iterable[Call], tries: Sequence[Try], cut: Cutoffs) -> Unlogged:
    left, without_call = match(calls, tries)
    by_name: dict[str, list[Try]] = defaultdict(list)
    for t in tries:
        by_name[t.buildrun].append(t)
    out = Unlogged(logged_without_call=without_call)
    for call in left:
        why, seen = cause(call, by_name[call.buildrun], cut)
        out.by_cause[why] += 1
        out.calls.append((call, why, seen))
    return out


def clock_offset(calls: Iterable[Call], wall_tries: Iterable[Try]) -> float | None:
    """Wall clock minus the timeline's monotonic clock, estimated from the BuildRuns with
    exactly one failed call and one logged webhook failure (`wall_tries` in wall-clock
    seconds): the call happened during that try. The middle of the bounds all such pairs
    agree on (the median pair's middle if noise leaves none); None without a pair."""
    one_call: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        one_call[c.buildrun].append(c)
    one_try: dict[str, list[Try]] = defaultdict(list)
    for t in wall_tries:
        if t.kind == "webhook":
            one_try[t.buildrun].append(t)
    pairs = [(one_try[n][0], cs[0]) for n, cs in one_call.items()
             if len(cs) == 1 and len(one_try.get(n, [])) == 1]
    if not pairs:
        return None
    lo = max(t.start - c.at for t, c in pairs)
    hi = min(t.end - c.at for t, c in pairs)
    if lo <= hi:
        return (lo + hi) / 2
    return statistics.median((t.start + t.end) / 2 - c.at for t, c in pairs)


@dataclass(frozen=True)
class Process:
    """A replica process as the timeline records it."""

    slot: int
    log: str
    ended: float | None
    signalled: bool  # ended by our signal (its time is in the kills), else on its own


def inputs(webhook_log: Iterable[Sequence[Any]], kills: Iterable[Sequence[Any]],
           processes: Iterable[Process], logs: Mapping[str, LogSummary],
           apiserver_kills: Sequence[float], leader_stalls: Iterable[Sequence[Any]],
           wall_minus_monotonic: float | None) -> tuple[list[Call], list[Try], Cutoffs]:
    """The soak's records (as kept in timeline.json) turned into this module's terms;
    the offset is estimated when None."""
    procs = list(processes)
    calls = [Call(float(t), str(name), str(v)) for t, name, v in webhook_log if v != "allow"]
    wall = [Try(name, kind, start, end) for p in procs if p.log in logs
            for name, kind, start, end in logs[p.log].failures]
    offset = wall_minus_monotonic if wall_minus_monotonic is not None else (
        clock_offset(calls, wall))
    if offset is None:
        raise ValueError("cannot map the replicas' log times onto the timeline's: it has no "
                         "wall_minus_monotonic, and no BuildRun has exactly one failed "
                         "webhook call and one logged webhook failure to estimate it from")
    tries = [Try(t.buildrun, t.kind, t.start - offset, t.end - offset) for t in wall]
    cut = Cutoffs(
        replica_ends=[(float(k[0]), int(k[1])) for k in kills]
        + [(p.ended, p.slot) for p in procs if p.ended is not None and not p.signalled],
        lease_losses=[(t - offset, p.slot) for p in procs if p.log in logs
                      for t in logs[p.log].lease_lost_at],
        apiserver_kills=list(apiserver_kills),
        leader_stalls=[(float(s[0]), int(s[1])) for s in leader_stalls],
    )
    return calls, tries, cut


def from_workdir(workdir: Path) -> Unlogged:
    timeline = json.loads((workdir / "timeline.json").read_text())
    procs = [Process(p["slot"], p["log"], p["ended"], bool(p["signal"]))
             for p in timeline["replica_processes"]]
    logs = {p.log: summarize_log(Path(p.log)) for p in procs}
    calls, tries, cut = inputs(timeline["webhook_calls"], timeline["replica_kills"], procs,
                               logs, timeline["apiserver_kills"], timeline["leader_stalls"],
                               timeline.get("wall_minus_monotonic"))
    return unlogged_calls(calls, tries, cut)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m soak.accounting", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workdir", type=Path, help="a soak's --workdir (timeline.json and logs)")
    args = p.parse_args(argv)
    try:
        out = from_workdir(args.workdir)
    except (OSError, ValueError, KeyError) as exc:
        print(f"soak.accounting: {args.workdir}: {exc!r}", file=sys.stderr)
        return 2
    print(f"{sum(out.by_cause.values())} failed calls no reconcile logged: {out.summary()}; "
          f"{out.logged_without_call} logged webhook errors had no recorded call")
    for call, why, seen in out.calls:
        print(f"  {call.at:.3f} {call.buildrun} {call.verdict}: {why} ({seen})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the fault soak (soak.run) runs: its knobs (Config, every one a flag of
`python -m soak.run`), the BuildRuns it creates and how each must end (Planned,
make_plan), and what the world does to them (Plan: each pod's fate, each call to the
soak's flaky webhook). Everything is drawn from the seed, each draw from its own
random.Random named after it ("<seed>:plan", "<seed>:fates", "<seed>:webhook"), so one
stream's use never shifts another's.

A BuildRun is one of:

    an outcome  valid; kwok plays out its pod's fate (FATES), and it must end with that
                outcome's reason (OUTCOME_REASON)
    user:<kind> a user error (USER_ERRORS): it must end with the error's reason and
                never have a TaskRun
    doomed      every webhook call for it fails: it must end ReconcilerRetriesExhausted
                and never have a TaskRun
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from controller.buildrun import reasons
from controller.runtime.kube import JSON
from controller.shipwright.params import UNDEFINED_PARAMETER
from devtools.cluster import fixtures
from devtools.fakes.fates import fate_annotations, results
from devtools.fakes.webhook import Verdict
from soak.actors import OUTCOMES, Outcome

NS = "soak"

OUTCOME_REASON: dict[Outcome, str] = {
    "success": reasons.SUCCEEDED,
    "failure": reasons.FAILED,
    "timeout": reasons.BUILD_RUN_TIMEOUT,
    "evicted": reasons.POD_EVICTED,
    "oom": reasons.STEP_OUT_OF_MEMORY,
}

# User errors: (what the BuildRun's spec gets, the reason it must end with).
USER_ERRORS: dict[str, tuple[JSON, str]] = {
    "missing-build": ({"build": {"name": "no-such-build"}}, reasons.BUILD_NOT_FOUND),
    "missing-sa": ({"build": {"name": fixtures.BUILD}, "serviceAccount": "ghost"},
                   reasons.SERVICE_ACCOUNT_NOT_FOUND),
    "undefined-param": ({"build": {"name": fixtures.BUILD},
                         "paramValues": [{"name": "colour", "value": "red"}]},
                        UNDEFINED_PARAMETER),
    # The API server admits it (format: duration); Go's time.ParseDuration does not.
    "bad-timeout": ({"build": {"name": fixtures.BUILD}, "timeout": "1 day"},
                    reasons.INVALID_TIMEOUT),
}
DOOMED = "doomed"
DIGEST = "sha256:" + "5a" * 32
# What kwok does with a pod, by planned outcome (hack/kwok/stages/README.md). A
# "timeout" pod holds until Tekton (the TaskRun's timeout) or the controller (the
# BuildRun's) stops it.
FATES: dict[Outcome, dict[str, str]] = {
    "success": {"fate": "succeed", "results": results(**{"shp-image-digest": DIGEST})},
    "failure": {"fate": "fail", "exit_code": "2"},
    "timeout": {"fate": "hold"},
    "evicted": {"fate": "evict"},
    "oom": {"fate": "oom"},
}


@dataclass(frozen=True)
class Config:
    buildruns: int = 500
    seed: int = 1
    create_rate: float = 5.0  # BuildRuns per second
    user_errors: float = 0.10  # fraction of BuildRuns with a user error
    doomed: float = 0.02  # fraction whose every webhook call fails
    outcome_weights: tuple[float, ...] = (0.5, 0.15, 0.1, 0.1, 0.15)  # in OUTCOMES order
    webhook_timeout: float = 0.05  # per call, for the others
    webhook_error: float = 0.15
    apiserver_restart_every: float = 10.0  # mean seconds between restarts; 0: never
    kill_every: float = 8.0  # mean seconds between replica kills; 0: never
    kill_leader: float = 0.75  # chance a kill targets the leader
    sigkill: float = 0.8  # chance a kill is SIGKILL rather than SIGTERM
    conflict_rate: float = 5.0  # label patches per second; 0: none
    tekton_delay: tuple[float, float] = (0.1, 2.0)  # pod Pending, then Running, this long
    buildrun_timeout: str = "6s"  # spec.timeout of runs planned to time out
    tekton_webhook_stop_every: float = 30.0  # mean seconds between stops; 0: never
    tekton_webhook_down: tuple[float, float] = (1.0, 3.0)  # seconds stopped, then started
    tekton_controller_kill_every: float = 30.0  # mean seconds between SIGKILLs; 0: never
    leader_stall_every: float = 30.0  # mean seconds between stalls of the leader's proxy
    leader_stall_seconds: float = 6.0  # longer than the lease (4 s): the leader must go
    max_retries: int = 8
    chaos_seconds: float = 900.0  # faults stop after this long at most
    settle_seconds: float = 180.0  # then everything must finish within this
    timeout: float = 1800.0  # the whole soak, setup included
    workdir: Path | None = None


@dataclass(frozen=True)
class Planned:
    name: str
    kind: str  # an Outcome, "user:<kind>" or "doomed"
    spec: JSON
    expected: str  # the terminal reason


def make_plan(cfg: Config) -> list[Planned]:
    rng = random.Random(f"{cfg.seed}:plan")
    plan = []
    for i in range(cfg.buildruns):
        name = f"br-{i:05d}"
        r = rng.random()
        if r < cfg.user_errors:
            kind = rng.choice(sorted(USER_ERRORS))
            user_spec, reason = USER_ERRORS[kind]
            plan.append(Planned(name, f"user:{kind}", user_spec, reason))
        elif r < cfg.user_errors + cfg.doomed:
            plan.append(Planned(name, DOOMED, {"build": {"name": fixtures.BUILD}},
                                reasons.RECONCILER_RETRIES_EXHAUSTED))
        else:
            how = rng.choices(OUTCOMES, weights=cfg.outcome_weights)[0]
            spec: JSON = {"build": {"name": fixtures.BUILD}}
            if how == "timeout":
                spec["timeout"] = cfg.buildrun_timeout
            plan.append(Planned(name, how, spec, OUTCOME_REASON[how]))
    return plan


class Plan:
    """make_plan's runs, with what the soak's webhooks answer for them: `fate` for kwok's
    (FateWebhook), `verdict` for the flaky TaskRun webhook (AttributedWebhook)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.runs = make_plan(cfg)
        self.doomed = {p.name for p in self.runs if p.kind == DOOMED}
        self.outcomes: dict[str, Outcome] = {
            p.name: p.kind for p in self.runs if p.kind in OUTCOMES
        }
        self._webhook_rng = random.Random(f"{cfg.seed}:webhook")
        self._fates = self._plan_fates()

    def _plan_fates(self) -> dict[str, dict[str, str]]:
        """Each planned run's pod annotations: its outcome's fate, and a Pending and a
        Running time drawn from tekton_delay."""
        rng = random.Random(f"{self.cfg.seed}:fates")
        lo, hi = self.cfg.tekton_delay
        out = {}
        for name, how in self.outcomes.items():
            out[name] = fate_annotations(
                **FATES[how], start_delay=f"{int(rng.uniform(lo, hi) * 1000)}ms",
                run_duration=f"{int(rng.uniform(lo, hi) * 1000)}ms")
        return out

    def fate(self, namespace: str, buildrun: str) -> dict[str, str] | None:
        return self._fates.get(buildrun) if namespace == NS else None

    def verdict(self, buildrun: str) -> Verdict:
        """What the next webhook call for `buildrun` gets; each call draws once, in the
        order the calls come."""
        r = self._webhook_rng.random()
        if buildrun in self.doomed:
            return "timeout" if r < 0.25 else "error"
        if r < self.cfg.webhook_timeout:
            return "timeout"
        if r < self.cfg.webhook_timeout + self.cfg.webhook_error:
            return "error"
        return "allow"

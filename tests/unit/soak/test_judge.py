"""soak.judge: the fault soak's verdict from what its watch saw and the run's record,
without a cluster: a run that ended as planned passes, and each broken invariant (lost,
flipped, duplicated, wrong) is caught and named."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from soak.judge import Evidence, Recorder, Report, Timeline, judge
from soak.plan import DOOMED, Config, Plan
from tests.unit.test_layering import REPO, imports_of

JSON = dict[str, Any]


def buildrun(name: str, reason: str | None, rv: str = "1") -> JSON:
    status: JSON = {}
    if reason is not None:
        status = {"completionTime": "2026-12-06T00:00:10Z", "conditions": [
            {"type": "Succeeded", "status": "True" if reason == "Succeeded" else "False",
             "reason": reason, "message": "m"}]}
    return {"metadata": {"name": name, "resourceVersion": rv}, "status": status}


def taskrun(owner: str, name: str) -> JSON:
    return {"metadata": {"name": name, "labels": {"buildrun.shipwright.io/name": owner},
                         "ownerReferences": [{"kind": "BuildRun", "name": owner,
                                              "controller": True}]},
            "status": {"conditions": [{"type": "Succeeded", "status": "True",
                                       "reason": "Succeeded"}]}}


class World:
    """A plan whose runs all ended as planned, each valid one with its TaskRun; a test
    changes one thing and judges."""

    def __init__(self, tmp_path: Path) -> None:
        self.plan = Plan(Config(buildruns=40, seed=5, doomed=0.2, max_retries=1))
        self.seen = Recorder()
        self.taskruns: list[JSON] = []
        self.webhook = SimpleNamespace(verdicts=[], by_buildrun={}, log=[], calls=0)
        log = tmp_path / "replica.log"
        log.write_text("")
        self.incarnation = SimpleNamespace(slot=0, number=0, log=log, ended=None,
                                           signal_sent=None, exit_code=0, scrape={})
        for p in self.plan.runs:
            self.seen.on_object("ADDED", buildrun(p.name, None))
            self.seen.on_object("MODIFIED", buildrun(p.name, p.expected, "2"))
            if p.kind == DOOMED:
                self.webhook.by_buildrun[p.name] = ["error", "timeout"]
                self.gave_up(p.name, tries=2)
            elif not p.kind.startswith("user:"):
                self.taskruns.append(taskrun(p.name, f"{p.name}-a"))

    def gave_up(self, name: str, tries: int) -> None:
        lines = [f'{{"msg": "reconciled", "result": "error", "key": "soak/{name}", '
                 '"error": "failed calling webhook"}'] * (tries - 1)
        lines.append(f'{{"msg": "retry budget spent, giving up", "key": "soak/{name}", '
                     '"error": "failed calling webhook"}')
        log: Path = self.incarnation.log
        log.write_text(log.read_text() + "\n".join(lines) + "\n")

    def name_of(self, kind: str) -> str:
        return next(p.name for p in self.plan.runs if p.kind == kind)

    def judge(self) -> Report:
        replicas = SimpleNamespace(incarnations=[self.incarnation], totals=dict,
                                   peak_rss=dict)
        evidence = Evidence(
            self.plan, self.seen, len(self.plan.runs), Timeline(wall_minus_monotonic=0.0),
            self.taskruns, self.webhook, 0, replicas,  # type: ignore[arg-type]
            SimpleNamespace(patches=0, on_unfinished=0, failed=0),  # type: ignore[arg-type]
            SimpleNamespace(watch_errors=0, lists=1))  # type: ignore[arg-type]
        report = Report(config={"seed": 5, "max_retries": 1}, workdir="/nowhere")
        judge(report, evidence)
        return report


def test_a_run_that_ended_as_planned_passes(tmp_path: Path) -> None:
    report = World(tmp_path).judge()
    assert report.ok, report.text()
    assert report.created == 40 and sum(report.reasons.values()) == 40
    assert report.reasons.get("ReconcilerRetriesExhausted", 0) >= 1  # the doomed ones
    assert report.text().endswith("result: OK")


def test_each_broken_invariant_is_caught_and_named(tmp_path: Path) -> None:
    w = World(tmp_path)
    success, failure = w.name_of("success"), w.name_of("failure")
    lost = [p.name for p in w.plan.runs if p.kind == "success"][1]
    w.seen.tracks.pop(lost)
    w.seen.on_object("MODIFIED", buildrun(failure, "Succeeded", "3"))  # after it had ended
    w.taskruns.append(taskrun(success, f"{success}-b"))
    report = w.judge()
    assert not report.ok
    assert [line.split(" ")[0] for line in report.lost] == [lost]
    assert [line.split(":")[0] for line in report.flipped] == [failure]
    assert [line.split(":")[0] for line in report.duplicated] == [success]
    assert report.wrong == []  # the first terminal state counts; the flip is its own error
    assert report.text().endswith("result: INVARIANT BROKEN")


def test_retries_exhausted_is_wrong_once_a_webhook_call_was_allowed(tmp_path: Path) -> None:
    w = World(tmp_path)
    doomed = w.name_of(DOOMED)
    w.webhook.by_buildrun[doomed] = ["error", "allow"]
    report = w.judge()
    assert [line.split(" ")[0] for line in report.wrong] == [doomed]
    assert "although a webhook call was allowed" in report.wrong[0]


def test_a_user_error_with_a_taskrun_is_wrong(tmp_path: Path) -> None:
    w = World(tmp_path)
    user = next(p.name for p in w.plan.runs if p.kind.startswith("user:"))
    w.taskruns.append(taskrun(user, f"{user}-a"))
    report = w.judge()
    assert [line.split(" ")[0] for line in report.wrong] == [user]
    assert "should have none" in report.wrong[0]


def test_the_fault_soak_imports_one_way() -> None:
    """What to run, how to judge it, the run: plan imports neither of the others, judge
    not the run, so the verdict can be had without a cluster and the plan without either."""
    soak = REPO / "soak"
    above = {"plan": ("soak.judge", "soak.run"), "judge": ("soak.run",)}
    broken = [f"soak/{name}.py imports {imported}"
              for name, forbidden in above.items()
              for imported in imports_of(soak / f"{name}.py")
              if any(imported == f or imported.startswith(f + ".") for f in forbidden)]
    assert not broken, "\n".join(broken)

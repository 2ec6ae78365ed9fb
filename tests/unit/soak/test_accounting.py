"""soak.accounting: each failed webhook call no reconcile logged gets the cause the
timeline shows (the soak's retry accounting, without a cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soak.accounting import (
    CAUSES,
    Call,
    Cutoffs,
    Try,
    cause,
    clock_offset,
    from_workdir,
    main,
    match,
    unlogged_calls,
)

WEBHOOK_500 = ('HTTP 500 InternalError: Internal error occurred: failed calling webhook '
               '"flaky.buildrun-controller.test": failed to call webhook: an error on the server')
TEKTON_500 = ('HTTP 500 InternalError: Internal error occurred: failed calling webhook '
              '"validation.webhook.pipeline.tekton.dev": failed to call webhook: Post ...')


def test_a_call_inside_a_logged_webhook_failure_is_logged_and_one_outside_is_not() -> None:
    calls = [Call(10.0, "a", "error"), Call(20.0, "a", "timeout"), Call(30.0, "b", "error")]
    tries = [Try("a", "webhook", 9.9, 10.1), Try("b", "webhook", 29.0, 29.5),
             Try("c", "webhook", 1.0, 2.0)]
    left, without_call = match(calls, tries)
    assert left == [Call(20.0, "a", "timeout"), Call(30.0, "b", "error")]
    assert without_call == 2  # b's try ended before its call; c had no failed call


def test_one_try_accounts_for_one_call_only() -> None:
    calls = [Call(10.0, "a", "error"), Call(10.2, "a", "error")]
    left, without_call = match(calls, [Try("a", "webhook", 9.0, 11.0)])
    assert left == [Call(10.2, "a", "error")] and without_call == 0


def test_a_try_that_failed_otherwise_does_not_log_a_webhook_failure() -> None:
    left, _ = match([Call(10.0, "a", "timeout")], [Try("a", "tekton-webhook", 9.9, 11.0)])
    assert left == [Call(10.0, "a", "timeout")]


CALL = Call(100.0, "a", "timeout")


@pytest.mark.parametrize(("cut", "expected"), [
    # The leader's proxy stalls before the 1 s answer; the leader loses its lease later.
    (Cutoffs(leader_stalls=[(100.4, 1)], lease_losses=[(103.0, 1)]), "leader_stall"),
    # The same lease loss with the stall on the other replica's proxy, or none at all.
    (Cutoffs(leader_stalls=[(100.4, 0)], lease_losses=[(103.0, 1)]), "lease_lost"),
    (Cutoffs(lease_losses=[(99.2, 0)]), "lease_lost"),
    # SIGKILLed 0.3 s before the API server called the webhook, or during the call.
    (Cutoffs(replica_ends=[(99.7, 1)]), "replica_end"),
    (Cutoffs(replica_ends=[(100.5, 0)], lease_losses=[(103.0, 1)],
             leader_stalls=[(100.6, 1)]), "replica_end"),
    # The API server killed mid-call costs the leader its lease.
    (Cutoffs(apiserver_kills=[100.5], lease_losses=[(102.9, 0)]), "apiserver_kill"),
    (Cutoffs(apiserver_kills=[100.5]), "apiserver_kill"),
    # Too early or too late to have cut this call short.
    (Cutoffs(replica_ends=[(98.0, 1), (106.0, 1)], leader_stalls=[(98.5, 1)],
             apiserver_kills=[90.0]), "unexplained"),
    (Cutoffs(), "unexplained"),
])
def test_the_first_thing_to_cut_a_reconcile_short_names_the_cause(cut: Cutoffs,
                                                                   expected: str) -> None:
    assert cause(CALL, [], cut)[0] == expected


def test_a_try_that_logged_another_failure_for_the_same_create_names_it() -> None:
    tekton = [Try("a", "tekton-webhook", 99.9, 101.0)]
    assert cause(CALL, tekton, Cutoffs(replica_ends=[(100.5, 1)]))[0] == "tekton_webhook"
    disconnected = [Try("a", "other", 99.9, 100.6)]
    assert cause(CALL, disconnected, Cutoffs(apiserver_kills=[100.5]))[0] == "apiserver_kill"
    # Another BuildRun's try, or another error with no API server kill, says nothing.
    assert cause(CALL, [Try("b", "tekton-webhook", 99.9, 101.0)], Cutoffs())[0] == "unexplained"
    assert cause(CALL, disconnected, Cutoffs())[0] == "unexplained"


def test_unlogged_calls_counts_each_cause_and_the_summary_names_every_one_found() -> None:
    calls = [Call(10.0, "a", "error"), Call(20.0, "b", "timeout"), Call(40.0, "c", "error")]
    out = unlogged_calls(calls, [Try("a", "webhook", 9.9, 10.1)],
                         Cutoffs(leader_stalls=[(20.5, 0)], lease_losses=[(23.0, 0)]))
    assert dict(out.by_cause) == {"leader_stall": 1, "unexplained": 1}
    assert [(c.buildrun, why) for c, why, _ in out.calls] == [("b", "leader_stall"),
                                                               ("c", "unexplained")]
    assert out.summary() == f"1 {CAUSES['leader_stall']}; 1 {CAUSES['unexplained']}"
    assert unlogged_calls([], [], Cutoffs()).summary() == f"0 {CAUSES['unexplained']}"


def test_the_clock_offset_is_estimated_from_single_call_single_try_buildruns() -> None:
    offset = 1_800_000_000.0
    calls = [Call(10.0, "a", "error"), Call(20.0, "b", "timeout"),
             Call(30.0, "c", "error"), Call(31.0, "c", "error")]
    wall = [Try("a", "webhook", offset + 9.98, offset + 10.01),
            Try("b", "webhook", offset + 19.99, offset + 21.0),
            Try("c", "webhook", offset + 50.0, offset + 50.1)]  # two calls: not used
    estimate = clock_offset(calls, wall)
    assert estimate is not None and offset - 0.01 <= estimate <= offset + 0.01
    assert clock_offset(calls[2:], wall) is None


def _log(path: Path, *entries: dict[str, object]) -> str:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return str(path)


# A timeline saved before the soak recorded its clock offset (the 5,000 run's) has it
# estimated from the calls and logged tries.
@pytest.mark.parametrize("recorded", [True, False])
def test_a_saved_workdir_is_accounted_from_its_timeline_and_logs(tmp_path: Path,
                                                                 recorded: bool) -> None:
    wall = 1_800_000_000.0  # the logs' clock, ahead of the timeline's by this much
    leader = _log(
        tmp_path / "replica-1-000.log",
        {"ts": wall + 10.1, "msg": "reconciled", "key": "soak/br-1", "result": "error",
         "duration": 0.2, "error": WEBHOOK_500},
        {"ts": wall + 12.0, "msg": "reconciled", "key": "soak/br-2", "result": "error",
         "duration": 1.0, "error": TEKTON_500},
        {"ts": wall + 33.0, "msg": "leader election lost, stopping at once",
         "error": "could not renew lease"},
    )
    standby = _log(tmp_path / "replica-0-000.log", {"ts": wall + 1.0, "msg": "serving"})
    (tmp_path / "timeline.json").write_text(json.dumps({
        **({"wall_minus_monotonic": wall} if recorded else {}),
        "webhook_calls": [[10.0, "br-1", "error"], [11.1, "br-2", "timeout"],
                          [15.0, "br-3", "allow"], [30.2, "br-3", "timeout"],
                          [50.0, "br-4", "error"]],
        "replica_kills": [[50.3, 0, "SIGKILL", False]],
        "apiserver_kills": [],
        "leader_stalls": [[30.6, 1, True]],
        "replica_processes": [
            {"slot": 1, "log": leader, "ended": 34.0, "signal": None},
            {"slot": 0, "log": standby, "ended": 50.4, "signal": "SIGKILL"}],
    }))
    out = from_workdir(tmp_path)
    assert [(c.buildrun, why) for c, why, _ in out.calls] == [
        ("br-2", "tekton_webhook"), ("br-3", "leader_stall"), ("br-4", "replica_end")]
    assert out.logged_without_call == 0


def test_a_timeline_with_no_clock_offset_and_nothing_to_estimate_it_from_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path / "replica-0-000.log", {"ts": 5.0, "msg": "serving"})
    (tmp_path / "timeline.json").write_text(json.dumps({
        "webhook_calls": [[10.0, "br-1", "error"]], "replica_kills": [],
        "apiserver_kills": [], "leader_stalls": [],
        "replica_processes": [{"slot": 0, "log": log, "ended": None, "signal": None}]}))
    with pytest.raises(ValueError, match="cannot map the replicas' log times"):
        from_workdir(tmp_path)
    assert main([str(tmp_path / "missing")]) == 2
    assert "soak.accounting: " in capsys.readouterr().err

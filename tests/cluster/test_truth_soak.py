"""The truth soak, short: six real builds on a real node (one of each kind: success,
failure, timeout, deleted while it runs and created again under the same name; and two
cancelled once their build step has ended) through two replica processes, while a
replica is killed, the API server restarted, the kubelet and containerd restarted, and
Tekton's controller restarted; then every BuildRun's outcome against the registry
(soak.truth, soak.ledger).
The long run is `python -m soak.truth` (see RELIABILITY.md).

It starts its own stack, not the session's: an API server restart and node restarts
would break the other tests' controllers and builds on the session's stack. Where this
machine cannot hold a real node it skips, saying why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.node.realnode import CONTAINERD, KUBELET, NodeUnavailable
from soak import builds
from soak.ledger import MISMATCHES
from soak.truth import FAULTS, Config, truth_soak

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

# One build of each kind (one cancelled while it builds), and two cancelled near their
# end: a cancel is sent once the soak sees the build step end, and the push that follows
# takes about a second, so one cancel lands while it runs about a third of the time
# (RELIABILITY.md).
WEIGHTS = tuple(2.0 if kind == builds.CANCEL_LATE else 1.0 for kind in builds.KINDS)


@pytest.mark.timeout(720)
async def test_short_truth_soak_every_outcome_is_what_the_registry_holds(
    tmp_path: Path,
) -> None:
    cfg = Config(
        builds=len(builds.KINDS) + 1,
        weights=WEIGHTS,
        seed=1,
        concurrency=3,
        fault_every=5.0,
        slow_timeout="60s",  # its pod runs a minute: faults find a build running
        # The cancel within half a second of the build step's end, while the push runs:
        # the moment a cancel must not turn a pushed image into BuildRunCanceled.
        late_window=0.5,
        mid_build_wait=30.0,
        build_seconds=400.0,
        settle_seconds=120.0,
        deadline=600.0,
        workdir=tmp_path / "truth",
    )
    lines: list[str] = []
    try:
        report = await truth_soak(cfg, lines.append)
    except NodeUnavailable as exc:
        pytest.skip(f"no real node on this machine: {exc}")
    text = report.text()
    print(text)  # shown by pytest on failure, with the logs' folder
    assert report.mismatches == dict.fromkeys(MISMATCHES, 0), text
    assert report.mismatch_list == [], text

    # The builds happened: as planned, the recreated one twice.
    assert report.planned == {kind: int(w) for kind, w in zip(builds.KINDS, WEIGHTS,
                                                               strict=True)}, text
    assert report.buildruns == len(builds.KINDS) + 2, text
    assert report.pushed >= 2, text  # the success and the recreated one, at least
    reasons = {r for by_reason in report.outcomes.values() for r in by_reason}
    assert {"Succeeded", "Failed", "BuildRunTimeout"} <= reasons, text
    assert sum(report.outcomes[builds.RECREATE].values()) == 2, text  # deleted, recreated
    sent = {a["what"]: a["answer"] for a in report.actions}
    assert sent.get("cancel") == "ok", text  # (at least one of the two)
    if "cancel mid-build" in sent:
        assert sent["cancel mid-build"] == "ok", text
    else:
        # The soak never saw its build mid-build: hung before it built (a containerd
        # restart while a step's container was created: StartError, RELIABILITY.md) or
        # built while the faults kept the soak's pod watch behind (seen 12-06: Succeeded,
        # its image in the registry). In 4 of 8 runs that day; its outcome is held to the
        # registry above all the same, and it did finish.
        assert sum(report.outcomes[builds.CANCEL_EARLY].values()) == 1, text
    assert "ok" in (sent.get("delete mid-build"), sent.get("delete after the build step")), text

    # Each fault really happened: a new process where the old one was, the node's
    # containers kept, and it struck while a build's pod ran.
    assert all(report.faults[kind] >= 1 for kind in FAULTS), text
    for fault in report.fault_log:
        detail = fault["detail"]
        if fault["kind"] == "controller":
            assert detail["exit_code"] is not None and detail["signal"] in (
                "SIGKILL", "SIGTERM"), text
        else:
            old, new = detail["pid"]
            assert old is not None and new is not None and old != new, text
        if fault["kind"] in (KUBELET, CONTAINERD) and fault["running"]:
            # Pods starting or ending meanwhile move the counts; a restart that took
            # the containers down would leave none of the shims there before.
            before, kept, _ = detail["shims before, kept, after"]
            assert before >= 1 and kept >= 1, text
    for kind in FAULTS:
        assert any(f["running"] for f in report.fault_log if f["kind"] == kind), (kind, text)
    assert report.health["tracebacks"] == 0, text
    assert report.health["pods_left"] == [], text  # the registry was read after every push

"""The Event recorder's backlog, without a server (nothing is posted: `run` never starts)."""

from __future__ import annotations

from controller.runtime.events import EventRecorder
from tests.harness import metric

BUILDRUN = {"apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
            "metadata": {"name": "br", "namespace": "ns", "uid": "u1"}}


def test_a_full_backlog_drops_and_counts_instead_of_waiting() -> None:
    recorder = EventRecorder(None, "c", "i", backlog=2, senders=1)  # type: ignore[arg-type]
    before = metric("controller_events_dropped_total", cause="backlog_full")
    for reason in ("Running", "Succeeded", "Extra"):
        recorder.record(BUILDRUN, "Normal", reason, "m")
    assert metric("controller_events_dropped_total", cause="backlog_full") - before == 1


def test_one_objects_events_keep_their_order_in_one_backlog() -> None:
    recorder = EventRecorder(None, "c", "i", backlog=100, senders=4)  # type: ignore[arg-type]
    for reason in ("Running", "Succeeded"):
        recorder.record(BUILDRUN, "Normal", reason, "m")
    queued = [b for b in recorder._backlogs if b.qsize()]
    assert len(queued) == 1
    assert [queued[0].get_nowait().reason for _ in range(2)] == ["Running", "Succeeded"]

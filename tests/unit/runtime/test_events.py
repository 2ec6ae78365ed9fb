"""The Event recorder's backlog, without a server (nothing is posted: `run` never starts)."""

from __future__ import annotations

import asyncio

from controller.runtime.events import EventRecorder
from tests.harness import metric
from tests.virtualtime import run

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


class Posting:
    """Stands in for Kube.create: records when each Event was posted (loop time)."""

    def __init__(self) -> None:
        self.posted: list[tuple[float, str]] = []

    async def create(self, resource: object, namespace: str, body: dict[str, str]) -> None:
        self.posted.append((asyncio.get_running_loop().time(), body["reason"]))


def test_events_wait_while_reconciles_wait_at_most_max_hold() -> None:
    """hold_while: nothing is posted while the controllers have a backlog; once it is
    gone, or max_hold after an Event was recorded, it is."""
    async def main() -> None:
        kube = Posting()
        loop = asyncio.get_running_loop()
        recorder = EventRecorder(kube, "c", "i", senders=1,  # type: ignore[arg-type]
                                 clock=loop.time)
        backlog = [True]
        recorder.hold_while(lambda: backlog[0], max_hold=10.0)
        sender = asyncio.create_task(recorder.run())
        t0 = asyncio.get_running_loop().time()
        recorder.record(BUILDRUN, "Normal", "First", "m")
        await asyncio.sleep(3.0)
        assert kube.posted == []  # held
        backlog[0] = False
        await asyncio.sleep(0.2)
        assert [r for _, r in kube.posted] == ["First"]
        assert 3.0 <= kube.posted[0][0] - t0 < 3.2
        backlog[0] = True
        recorder.record(BUILDRUN, "Normal", "Second", "m")
        await asyncio.sleep(12.0)  # the backlog never goes: posted at max_hold
        assert [r for _, r in kube.posted] == ["First", "Second"]
        assert 10.0 <= kube.posted[1][0] - t0 - 3.2 < 10.3
        recorder.record(BUILDRUN, "Normal", "Third", "m")
        await recorder.flush(1.0)  # a clean stop is held no longer
        assert [r for _, r in kube.posted] == ["First", "Second", "Third"]
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)

    run(main())

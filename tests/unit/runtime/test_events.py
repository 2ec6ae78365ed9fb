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


def test_a_deferred_event_is_recorded_once_its_message_is_there_and_flush_waits_for_it(
) -> None:
    """record_deferred: the caller goes on at once; the Event is posted with the message
    the awaitable gave, and a clean stop's flush waits for it."""
    async def main() -> None:
        kube = Posting()
        recorder = EventRecorder(kube, "c", "i", senders=1)  # type: ignore[arg-type]
        sender = asyncio.create_task(recorder.run())
        given = asyncio.Event()

        async def message() -> str:
            await given.wait()
            return "with the lines"

        recorder.record_deferred(BUILDRUN, "Warning", "Failed", message())
        await asyncio.sleep(1.0)
        assert kube.posted == []  # still being worked out
        given.set()
        await recorder.flush(5.0)
        assert [r for _, r in kube.posted] == ["Failed"]
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)

    run(main())


def test_a_deferred_message_that_raises_loses_the_event_not_the_recorder() -> None:
    async def main() -> None:
        kube = Posting()
        recorder = EventRecorder(kube, "c", "i", senders=1)  # type: ignore[arg-type]
        sender = asyncio.create_task(recorder.run())
        before = metric("controller_events_dropped_total", cause="refused")

        async def broken() -> str:
            raise RuntimeError("a bug")

        recorder.record_deferred(BUILDRUN, "Warning", "Failed", broken())
        recorder.record(BUILDRUN, "Normal", "After", "m")
        await recorder.flush(5.0)
        assert [r for _, r in kube.posted] == ["After"]
        assert metric("controller_events_dropped_total", cause="refused") - before == 1
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)

    run(main())


def test_stopping_the_recorder_gives_up_deferred_events_still_waiting() -> None:
    async def main() -> None:
        recorder = EventRecorder(Posting(), "c", "i", senders=1)  # type: ignore[arg-type]
        sender = asyncio.create_task(recorder.run())

        async def never() -> str:
            await asyncio.Event().wait()
            return ""

        recorder.record_deferred(BUILDRUN, "Warning", "Failed", never())
        await asyncio.sleep(0.1)
        (task,) = recorder._deferred
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        await asyncio.sleep(0)
        assert task.cancelled() and not recorder._deferred

    run(main())

"""The retry budget counts the tries the backoff allowed (issue 26), on real Tekton.

With Tekton's webhook stopped, every TaskRun create fails with 500 "failed calling
webhook": a system error, retried with backoff until the budget is spent. The first try
also labels the BuildRun with its Build (a metadata patch): before the BuildRun event
filter (controller/buildrun/setup.py `buildrun_wakes`), that write's own watch event
queued the key again at once, so the second try came about 0.05 s after the first
instead of one base delay later, and --max-retries was spent faster than the backoff
implies. Here each try is timed, and the budget must end the run exactly when README
says: after --max-retries retries, or at the first failure --max-retry-duration seconds
after the first.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.runtime.controller import Result
from controller.runtime.errors import RetryableError
from controller.settings import QueueSettings, RetryBudget
from controller.shipwright.resources import BUILDS
from devtools.cluster.stack import TektonStack
from tests.harness import World, condition, controller_settings, running_controller, wait_for

pytestmark = pytest.mark.cluster

BASE = 0.5  # the first backoff; then 1, 2, 4 s (no jitter)
EARLY = 0.02  # a try this much before its backoff is due is a try the backoff did not allow
LATE = 0.6  # slack for a busy two-core machine


class Timed:
    """The controller's reconciler, with the time of every try at one key."""

    def __init__(self, inner: Any, key: str) -> None:
        self.inner, self.key = inner, key
        self.tries: list[float] = []
        self.gave_up: list[tuple[float, RetryableError]] = []

    async def reconcile(self, key: str) -> Result:
        if key == self.key:
            self.tries.append(time.monotonic())
        result: Result = await self.inner.reconcile(key)
        return result

    async def give_up(self, key: str, error: RetryableError) -> Result:
        if key == self.key:
            self.gave_up.append((time.monotonic(), error))
        result: Result = await self.inner.give_up(key, error)
        return result


@pytest.mark.parametrize(("budget", "tries"), [
    # --max-retries 4: the first try and 4 retries, 0.5, 1, 2 and 4 s apart.
    (RetryBudget(max_retries=4, max_age=0), 5),
    # --max-retry-duration 2.5: tries at 0, 0.5 and 1.5 s are within it; the one at 3.5 s
    # is the first failure past it and ends the run.
    (RetryBudget(max_retries=0, max_age=2.5), 4),
], ids=["max-retries", "max-retry-duration"])
async def test_a_failing_key_is_tried_at_the_backoffs_times_and_ends_at_the_budget(
    stack: TektonStack, world: World, budget: RetryBudget, tries: int
) -> None:
    settings = controller_settings(
        stack.cluster, world.ns, budget=budget,
        queue=QueueSettings(base_delay=BASE, max_delay=60.0, jitter=0.0))
    stack.tekton.stop_webhook()
    try:
        async with running_controller(settings) as app:
            async def registered() -> bool:
                build = await world.kube.get(BUILDS, world.ns, "app")
                return (build.get("status") or {}).get("registered") == "True"
            await wait_for(registered, timeout=30, what="the Build to be validated")
            controller = app.controller("buildrun")
            timed = Timed(controller.reconciler, f"{world.ns}/br")
            controller.reconciler = timed
            await world.buildrun("br")
            done = await world.finished("br", timeout=30)
    finally:
        stack.tekton.start_webhook()
        await stack.tekton.webhook_admits()

    [(gave_up_at, error)] = timed.gave_up
    # The completion write's own event queues one more look (rows 2-4: nothing to do
    # here); that is no try.
    failed = [t for t in timed.tries if t < gave_up_at]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(failed)]
    wanted = [BASE * 2**i for i in range(tries - 1)]
    assert len(failed) == tries, (gaps, wanted)
    for gap, want in zip(gaps, wanted, strict=True):
        assert want - EARLY <= gap <= want + LATE, (gaps, wanted)
    assert 0 <= gave_up_at - failed[-1] <= LATE
    assert error.error_class == "webhook", error
    assert condition(done)["reason"] == reasons.RECONCILER_RETRIES_EXHAUSTED, condition(done)
    assert "webhook" in condition(done)["message"]
    assert done["metadata"]["labels"]["build.shipwright.io/name"] == "app"
    assert await world.taskruns() == []

"""The BuildRun reconciler: observe, decide with the state table, act.

Both entry points, `reconcile` and `give_up` (the retry budget is spent), run the
same three steps, each in a module of its own:

- observe (`observe.py`): the facts `states.decide` reads and the objects the action
  works on; for a NEW BuildRun, `plan.py` finds and checks what it references and
  works out what START will create, or the user error;
- decide (`states.py`): the row, pure;
- act (`actions.py`): the row's Action, each in one `case`; every status write goes
  through `status_writes.write_status`, which refuses to touch a BuildRun whose
  completionTime is set, re-reading it on conflict.

How specs, TaskRuns and statuses are shaped lives in the pure modules beside these
(`buildruns.py`, `spec.py`, `validation.py`, `outcomes.py`), and the TaskRun or
PipelineRun generated in `resources/`.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import replace

from controller.buildrun.actions import WAKE_MARGIN, Actions
from controller.buildrun.buildruns import phase_of, ttl_left
from controller.buildrun.caches import Caches
from controller.buildrun.executors import Executor
from controller.buildrun.observe import Observer
from controller.buildrun.plan import Planner
from controller.buildrun.resources.config import SHIPWRIGHT_DEFAULTS, ShipwrightConfig
from controller.buildrun.retries import OFF, Policy
from controller.buildrun.snippets import FailureLogs
from controller.buildrun.spec import build_name
from controller.buildrun.states import Action, Phase, decide
from controller.runtime.controller import DONE, Result
from controller.runtime.errors import RetryableError
from controller.runtime.events import EventRecorder
from controller.runtime.kube import JSON, Kube, key_of, split_key
from controller.runtime.timestamps import Clock, now
from controller.settings import QueueSettings, Settings
from controller.shipwright.resources import BUILDRUNS


class BuildRunReconciler:
    def __init__(
        self,
        kube: Kube,
        caches: Caches,
        recorder: EventRecorder,
        *,
        executor: Executor,
        clock: Clock = now,
        config: ShipwrightConfig = SHIPWRIGHT_DEFAULTS,
        timeout_grace: float = Settings.timeout_grace,
        look_again: float = QueueSettings.max_delay,
        pending_timeout: float | None = Settings.pending_timeout,
        retries: Policy = OFF,
        fail_on_owner_conflict: bool = Settings.fail_on_owner_conflict,
        failure_logs: FailureLogs | None = None,
    ) -> None:
        """`executor` is what a new BuildRun runs as (setup.py resolves BUILDRUN_EXECUTOR
        to it once); `config` the generators' settings, which setup.py reads from the
        environment once, at start (Shipwright's defaults when not given); `timeout_grace`
        how long Tekton gets to end a run past its timeout (row 19) or after a cancel
        (row 17) before the backstops do; `look_again` when a DONE BuildRun whose retry
        budget is spent is tried again (give_up: the queue's longest backoff);
        `pending_timeout` how long a run may wait to run (row 20) where no annotation
        says (--pending-timeout); `fail_on_owner_conflict` --fail-on-owner-conflict (Planner);
        `retries` the infrastructure retries' flags (row 13); `failure_logs` puts a
        failed step's last lines in its Event (--failure-log-snippet; None: off)."""
        self.kube = kube
        self.caches = caches
        self.planner = Planner(kube, caches, config, fail_on_owner_conflict)
        self.observer = Observer(kube, caches, self.planner, clock, executor, timeout_grace,
                                 pending_timeout, retries)
        self.actions = Actions(kube, recorder, clock, timeout_grace, retries, failure_logs,
                               turn_holder=self.observer.turn_holder)
        self.clock = clock
        self.look_again = look_again
        # Per serial Build (namespace/name): the lock of its turn to start a run, between
        # this process's workers. The turn itself is the Build's (Actions.take_turn: a
        # write the API server orders, across replicas); the lock saves the calls two
        # workers would make racing for it (live looks, a 409 and its re-read).
        self._turns: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary())

    def next_look(self, buildrun: JSON) -> float | None:
        """Seconds until a BuildRun seen in the cache needs a reconcile (0: now), or None:
        none unless an event brings news. What the event mapper asks of a BuildRun the
        initial list, a resync or its completion brings (setup.py), so a restart costs
        no reconcile per finished BuildRun and a completion no second one.

        NEW and RUNNING: now. DONE: the state table decides, on what the caches hold
        (Observer.observe_done, the same facts a reconcile would see): now when a row acts
        (the run still going, the TTL passed, the generated ServiceAccount left), else
        when the retention TTL runs out (row 4's requeue), else never. A run or
        ServiceAccount the caches do not hold yet queues the BuildRun by its own event."""
        if phase_of(buildrun) is not Phase.DONE:
            return 0.0
        if decide(self.observer.observe_done(buildrun).observation).action is not Action.NOTHING:
            return 0.0
        ttl = ttl_left(buildrun, self.clock())
        return None if ttl is None else ttl + WAKE_MARGIN

    async def reconcile(self, key: str) -> Result:
        buildrun = self.caches.buildruns.get(key)
        if buildrun is None:
            return DONE  # deleted; its TaskRun goes with it (ownerReference)
        seen = await self.observer.observe(buildrun)
        if seen is None:
            return DONE
        decision = decide(seen.observation)
        if decision.action is Action.START and seen.observation.run_policy:
            # A serial Build's BuildRun starts in its Build's turn: no other worker of this
            # process starts a run of the Build between the look again and the status
            # write that records the run (observe.recheck_serial says what it reads), and
            # START takes the Build's turn in the API server first (Actions.take_turn).
            async with self._turn(key_of(buildrun), build_name(buildrun)):
                seen = await self.observer.recheck_serial(seen)
                return await self.actions.act(seen, decide(seen.observation))
        return await self.actions.act(seen, decision)

    def _turn(self, key: str, build: str | None) -> asyncio.Lock:
        """The lock of a Build's turn to start a run, kept while anyone holds it."""
        namespace, _ = split_key(key)
        lock = self._turns.get(f"{namespace}/{build}")
        if lock is None:
            lock = self._turns[f"{namespace}/{build}"] = asyncio.Lock()
        return lock

    async def give_up(self, key: str, error: RetryableError) -> Result:
        """The retry budget is spent: observe once more with the last error, and act on
        the table's decision (a run of it recorded, a finished one's outcome, else
        ReconcilerRetriesExhausted).

        A DONE BuildRun's outcome is written already; what its rows still had to do (stop
        its run, delete its generated ServiceAccount) is tried again `look_again` seconds
        on, with a fresh budget: nothing else might queue it (a ServiceAccount left for
        good was found by the interleavings machine), and an immediate try would only
        fail the way the spent budget did.
        """
        namespace, name = split_key(key)
        buildrun = await self.kube.get_or_none(BUILDRUNS, namespace, name)
        if buildrun is None:
            return DONE
        phase = phase_of(buildrun)
        if phase is Phase.DONE:
            return Result(requeue_after=self.look_again)
        # In NEW, a try may have created the TaskRun and then failed to say so (row 5). In
        # RUNNING, the run is read live: a verdict that does not wait for it follows.
        seen = await (self.observer.observe_unrecorded(buildrun) if phase is Phase.NEW
                      else self.observer.observe_run(buildrun, fresh=True))
        observation = replace(seen.observation, retries_exhausted=error)
        return await self.actions.act(replace(seen, observation=observation),
                                      decide(observation))

"""Acting on a decided row: `Actions.act` carries out each Action of the state table in
one `case`. Every write a BuildRun's reconcile makes is here; status goes through
`status_writes.write_status`, the only status writer.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import assert_never

from controller.buildrun import metrics, reasons, serviceaccounts
from controller.buildrun.annotations import INFRASTRUCTURE_ATTEMPTS, SERIAL_TURN
from controller.buildrun.buildruns import (
    build_link,
    cancel_left,
    deadline_left,
    owned_by,
    pod_wait_left,
    run_start,
    ttl_left,
)
from controller.buildrun.executors import Executor
from controller.buildrun.observe import Seen
from controller.buildrun.outcomes import run_finished, running_reason, same_meaning
from controller.buildrun.plan import Plan
from controller.buildrun.resources.phases import run_name
from controller.buildrun.retries import OFF, Attempt, Policy, attempts_of, retry_run, with_attempt
from controller.buildrun.retries import delay as retry_delay
from controller.buildrun.serial import claim, turn_value
from controller.buildrun.snippets import FailureLogs, failed_step
from controller.buildrun.states import Action, Decision, decide
from controller.buildrun.status_writes import (
    cancel_asked,
    finished,
    progressed,
    retried,
    started,
    waiting,
    write_status,
)
from controller.runtime.conflict import patch_pinned, reread, retry_on_conflict
from controller.runtime.controller import DONE, Result
from controller.runtime.errors import (
    RetryableError,
    UserError,
    is_already_exists,
    is_conflict,
    is_invalid,
    is_not_found,
    is_too_large,
)
from controller.runtime.events import EventRecorder
from controller.runtime.kube import (
    APPLY_PATCH,
    JSON,
    SERVICEACCOUNTS,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Kube,
)
from controller.runtime.shapes import text
from controller.runtime.timestamps import Clock, format_time, parse_time
from controller.shipwright import field_managers
from controller.shipwright import metrics as shipwright_metrics
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.resources import BUILDRUNS, BUILDS

log = logging.getLogger(__name__)


class Actions:
    def __init__(self, kube: Kube, recorder: EventRecorder, clock: Clock,
                 timeout_grace: float, retries: Policy = OFF,
                 failure_logs: FailureLogs | None = None, *,
                 turn_holder: Callable[[JSON], Awaitable[tuple[JSON | None, bool]]]) -> None:
        self.kube = kube
        # The BuildRun that holds a serial Build's turn, as known (Observer.turn_holder).
        self.turn_holder = turn_holder
        self.recorder = recorder
        self.clock = clock
        # How long past Tekton's timeout a running BuildRun is given up on (the backstop).
        self.timeout_grace = timeout_grace
        # Infrastructure retries: the delay before the first (row 13).
        self.retries = retries
        # --failure-log-snippet: a failed step's last lines in the failure's Event.
        self.failure_logs = failure_logs

    async def act(self, seen: Seen, decision: Decision) -> Result:
        """Carries out the decided row's action; the one place each Action is handled."""
        buildrun, run, executor = seen.buildrun, seen.run, seen.executor
        match decision.action:
            case Action.NOTHING:
                return _requeue_at(ttl_left(buildrun, self.clock()))  # row 2, when due
            case Action.STOP_RUN:
                assert run is not None
                await self.cancel(executor, run)
                return _requeue_at(ttl_left(buildrun, self.clock()))
            case Action.DELETE:
                await self.delete(buildrun)
                return DONE
            case Action.START:
                plan = seen.plan
                assert plan is not None
                if seen.observation.run_policy and seen.build is not None:
                    behind = await self.take_turn(buildrun, seen.build)
                    if behind:
                        # Another BuildRun of the Build holds its turn: it goes first (row 11).
                        observation = replace(seen.observation, serial_behind=behind)
                        return await self.act(replace(seen, observation=observation),
                                              decide(observation))
                if seen.build is not None:
                    buildrun = await self.link_to_build(buildrun, seen.build)
                    seen = replace(seen, buildrun=buildrun, build=None)
                try:
                    return await self.start(buildrun, plan, executor)
                except UserError as exc:
                    # The API server's answer to the start is the user's to fix: the
                    # table decides again with it (row 8).
                    observation = replace(seen.observation, user_error=exc)
                    return await self.act(seen, decide(observation))
            case Action.FINISH:
                if seen.build is not None:
                    # A user error after the Build resolved: labelled as Shipwright does.
                    buildrun = await self.link_to_build(buildrun, seen.build)
                await self._finish(seen, buildrun, decision)
                return DONE
            case Action.DELETE_SERVICE_ACCOUNT:
                assert seen.service_account is not None
                await self._delete_service_account(seen.service_account)
                return _requeue_at(ttl_left(buildrun, self.clock()))
            case Action.ADOPT:
                assert run is not None
                if seen.build is not None:
                    buildrun = await self.link_to_build(buildrun, seen.build)
                await write_status(self.kube, buildrun, started(
                    executor, run, seen.plan.snapshot if seen.plan else None,
                    format_time(self.clock())))
                # Its status write (a change of phase) wakes it too; the RUNNING rows go on.
                return _requeue_at(0.0)
            case Action.RETRY:
                return await self.retry(seen)
            case Action.AWAIT_POD:
                assert run is not None
                return _requeue_at(pod_wait_left(run, self.clock(), self.timeout_grace))
            case Action.CANCEL:
                assert run is not None
                written = await write_status(self.kube, buildrun,
                                             cancel_asked(executor, format_time(self.clock())))
                if seen.observation.pod_outcome is None:
                    await self.cancel(executor, run)
                # Tekton's end of the run wakes it; this is for a run that never ends.
                return _requeue_at(cancel_left(written or buildrun, self.clock(),
                                               self.timeout_grace))
            case Action.WAIT:
                # The end of the one ahead wakes it (setup.py: a serial Build's BuildRun
                # or run that ends wakes the Build's NEW BuildRuns): no requeue.
                before = succeeded_condition(buildrun.get("status")) or {}
                written = await write_status(self.kube, buildrun,
                                             waiting(decision, format_time(self.clock())))
                if written is not None:
                    if before.get("reason") != decision.reason:
                        metrics.SERIAL_WAITS.labels(buildrun["metadata"]["namespace"]).inc()
                    self.recorder.record(buildrun, "Normal", decision.reason, decision.message)
                return DONE
            case Action.PROGRESS:
                assert run is not None
                written = await self._progress(buildrun, run, seen.pod)
                deadline = deadline_left(written or buildrun, run, executor.timeout(run),
                                         self.clock(), self.timeout_grace)
                if seen.pending_left is not None:  # row 20's, if sooner
                    deadline = (min(deadline, seen.pending_left) if deadline is not None
                                else seen.pending_left)
                if seen.poll is not None:  # nothing else would wake it
                    deadline = min(deadline, seen.poll) if deadline is not None else seen.poll
                return _requeue_at(deadline)
            case _:
                assert_never(decision.action)

    async def start(self, buildrun: JSON, plan: Plan, executor: Executor) -> Result:
        """Row 12: make the ServiceAccount ready, create (or adopt) the TaskRun (or
        PipelineRun, as `executor` says) and record it in one status write.

        Raises UserError when the API server's answer is the user's to fix (it is
        invalid, its name is taken, the snapshot does not fit, the ServiceAccount is
        gone); the caller decides again with it (row 8)."""
        namespace = buildrun["metadata"]["namespace"]
        await self._ready_service_account(namespace, plan)
        try:
            created = await self.kube.create(executor.resource, namespace, plan.run)
        except ApiError as exc:
            if is_already_exists(exc):
                created = await self._adopt(buildrun, executor,
                                            plan.run["metadata"]["name"])
            elif is_invalid(exc):
                # Its own validation (CRD schema or Tekton's webhook) refused what the
                # user asked for: retrying cannot change the answer. Shipwright's reason
                # for the TaskRun; for a PipelineRun too (its PipelineRunGenerationFailed
                # is for a generator error, which ours never has).
                raise UserError(reasons.TASK_RUN_GENERATION_FAILED,
                                f"the {executor.kind} was rejected: {exc.message}") from exc
            else:
                raise
        now = format_time(self.clock())
        try:
            written = await write_status(
                self.kube, buildrun, started(executor, created, plan.snapshot, now))
        except ApiError as exc:
            if not is_too_large(exc):
                raise
            # The snapshot of a BuildRun near etcd's size limit does not fit in its
            # status: no retry can change that. Stop the run; the user must shrink it.
            await self.cancel(executor, created)
            raise UserError(reasons.BUILD_RUN_TOO_LARGE,
                            f"the BuildRun is too large to record its build spec: {exc.message}"
                            ) from exc
        # No Event for a start: the status says it, and one Event per start cost about
        # 15% of the API server's throughput (BENCHMARKS.md). Running and the outcome get one.
        if written is not None:
            created_at = parse_time(buildrun["metadata"].get("creationTimestamp"))
            if created_at is not None:
                metrics.buildrun_started(
                    written, max((self.clock() - created_at).total_seconds(), 0.0))
            self._established(buildrun, written)
        # Tekton's events wake it before; this is for a run Tekton never starts or ends.
        return _requeue_at(deadline_left(written or buildrun, created,
                                         executor.timeout(created), self.clock(),
                                         self.timeout_grace))

    async def take_turn(self, buildrun: JSON, build: JSON) -> str:
        """A serial Build's BuildRun about to start takes the Build's turn (serial.claim):
        its name and uid in the Build's SERIAL_TURN annotation, by a merge patch that
        carries the resourceVersion the decision was worked out from (and the Build's uid).
        A concurrent writer (another worker, another replica, the user) makes it a 409:
        the Build is read again and the turn claimed anew, up to CONFLICT_TRIES times,
        then the conflict is raised (a system error: retried with backoff). Returns ""
        once the BuildRun holds the turn (written now, or already), else the name of the
        unfinished BuildRun that holds it. A Build deleted meanwhile (or replaced by a
        namesake) is a system error too: the next try plans against what is there."""
        gone = RetryableError("conflict", f"Build {build['metadata']['name']!r} was deleted "
                              "or replaced while the BuildRun started")

        async def take(current: JSON | None) -> str:
            if current is None:
                raise gone
            turn = claim(buildrun, current, *await self.turn_holder(current))
            if not turn.take:
                return turn.behind
            patched = await patch_pinned(self.kube, BUILDS, current, {"metadata": {
                "resourceVersion": current["metadata"]["resourceVersion"],
                "annotations": {SERIAL_TURN: turn_value(buildrun)}}})
            if patched is None:
                raise gone
            return ""

        return await retry_on_conflict(self.kube, BUILDS, build, take)

    async def retry(self, seen: Seen) -> Result:
        """Row 13: the run failed for the infrastructure, an attempt is left. First the
        attempt is recorded on the BuildRun (the annotation, once; an Event and the metric
        with it), then, once its backoff has passed (requeue-after), the next attempt's
        run is created under the name its number gives (AlreadyExists: the one an earlier
        try made, adopted) and recorded in the status. A restart between any two of these
        steps neither loses the attempt nor makes two runs for it: the record comes first,
        and the name follows from it."""
        buildrun, run, executor, failure = seen.buildrun, seen.run, seen.executor, seen.failure
        assert run is not None and failure is not None
        failed = run["metadata"]["name"]
        nxt = run_name(buildrun, seen.next_attempt)
        recorded = next((a for a in attempts_of(buildrun) if a.task_run == failed), None)
        changed = False
        if recorded is None:
            recorded = Attempt(failed, failure.reason, failure.message,
                               format_time(self.clock()))
            written = await self._record_attempt(buildrun, recorded)
            if written is None:
                return DONE  # deleted, or replaced by a namesake
            buildrun, changed = written
            recorded = next(a for a in attempts_of(buildrun) if a.task_run == failed)
        if changed:
            # Once per attempt: only the write that recorded it says so (a cache that lags
            # the record makes the next reconcile find it recorded at its write).
            wait = retry_delay(self.retries.delay, seen.next_attempt)
            metrics.INFRASTRUCTURE_RETRIES.labels(failure.reason).inc()
            self.recorder.record(
                buildrun, "Warning", reasons.INFRASTRUCTURE_RETRY,
                f"{executor.kind} {failed} failed for the infrastructure ({failure.reason}: "
                f"{failure.message}); attempt {seen.next_attempt} of "
                f"{seen.attempts_allowed} runs as {executor.kind} {nxt} in {wait:g}s")
            log.info("infrastructure failure, retrying", extra={
                "key": f"{buildrun['metadata']['namespace']}/{buildrun['metadata']['name']}",
                "run": failed, "reason": failure.reason, "next": nxt})
        due = parse_time(recorded.time)
        wait = retry_delay(self.retries.delay, seen.next_attempt)
        left = (wait - (self.clock() - due).total_seconds()) if due is not None else 0.0
        if left > 0:
            return _requeue_at(left)
        namespace = buildrun["metadata"]["namespace"]
        # Read whole: the informer's copy lacks the task spec (executors' slim).
        whole = await self.kube.get_or_none(executor.resource, namespace, failed)
        if whole is None or not owned_by(whole, buildrun):
            return _requeue_at(0.0)  # deleted meanwhile: row 16 decides, its event wakes it
        try:
            created = await self.kube.create(executor.resource, namespace,
                                             retry_run(whole, nxt))
        except ApiError as exc:
            if not is_already_exists(exc):
                raise
            created = await self._adopt(buildrun, executor, nxt)
        await write_status(self.kube, buildrun, retried(executor, failed, created,
                                                       format_time(self.clock())))
        return _requeue_at(deadline_left({}, created, executor.timeout(created),
                                         self.clock(), self.timeout_grace))

    async def _record_attempt(self, buildrun: JSON,
                              attempt: Attempt) -> tuple[JSON, bool] | None:
        """The attempt added to the BuildRun's record (INFRASTRUCTURE_ATTEMPTS),
        over the resourceVersion read, so no entry is lost to a concurrent writer: the
        BuildRun as written and whether this write added it (False: recorded already),
        None when it is gone."""
        async def record(current: JSON | None) -> tuple[JSON, bool] | None:
            if current is None:
                return None
            value = with_attempt(current, attempt)
            if (current["metadata"].get("annotations") or {}).get(
                    INFRASTRUCTURE_ATTEMPTS) == value:
                return current, False
            patched = await patch_pinned(self.kube, BUILDRUNS, current, {"metadata": {
                "resourceVersion": current["metadata"]["resourceVersion"],
                "annotations": {INFRASTRUCTURE_ATTEMPTS: value}}})
            return None if patched is None else (patched, True)

        return await retry_on_conflict(self.kube, BUILDRUNS, buildrun, record)

    async def link_to_build(self, buildrun: JSON, build: JSON) -> JSON:
        """What Shipwright writes on a BuildRun of a validated Build before it runs: the
        labels `build.shipwright.io/name` and `/generation` (clients select a Build's
        BuildRuns by them), and with retention.atBuildDeletion the Build as an owner, so
        the garbage collector deletes the BuildRun with it. One metadata patch, only if
        something is missing; returns the BuildRun as it now is.

        The Build controller sets the same owner reference on a Build's BuildRuns
        (Shipwright's ownerreferences step), so the two may race: on a conflict the
        BuildRun is read again and the change worked out anew, as `write_status` does."""
        async def link(current: JSON | None) -> JSON:
            if current is None:
                return buildrun  # deleted or replaced: the status write will find it gone
            change = build_link(current, build)
            if not change:
                return current
            linked = await patch_pinned(self.kube, BUILDRUNS, current, {"metadata": change})
            return buildrun if linked is None else linked

        return await retry_on_conflict(self.kube, BUILDRUNS, buildrun, link)

    async def _ready_service_account(self, namespace: str, plan: Plan) -> None:
        """Creates the generated ServiceAccount, or adds the Build's secrets to the chosen
        one (a strategic merge patch: the list is merged by name, nothing is dropped)."""
        if plan.create_service_account is not None:
            try:
                await self.kube.create(SERVICEACCOUNTS, namespace, plan.create_service_account)
            except ApiError as exc:
                if not is_already_exists(exc):
                    raise
            return
        if not plan.add_secrets:
            return
        # Pinned to the ServiceAccount the plan read: one recreated meanwhile may lack
        # other secrets, so the start is planned again (a conflict, retried).
        read = {"metadata": {"namespace": namespace, "name": plan.service_account,
                             "uid": plan.service_account_uid}}
        patched = await patch_pinned(self.kube, SERVICEACCOUNTS, read,
                                     serviceaccounts.secrets_patch(plan.add_secrets),
                                     content_type=STRATEGIC_MERGE_PATCH)
        if patched is None:
            if await self.kube.get_or_none(SERVICEACCOUNTS, namespace,
                                           plan.service_account) is not None:
                raise RetryableError("conflict", f"ServiceAccount {plan.service_account!r} "
                                     "was replaced while the BuildRun started")
            raise UserError(reasons.SERVICE_ACCOUNT_NOT_FOUND,
                            f"ServiceAccount {plan.service_account!r} not found in namespace "
                            f"{namespace!r}")
        log.info("added the Build's secrets to the ServiceAccount",
                 extra={"key": f"{namespace}/{plan.service_account}",
                        "secrets": plan.add_secrets})

    async def _adopt(self, buildrun: JSON, executor: Executor, name: str) -> JSON:
        """A TaskRun (PipelineRun) named as planned exists: ours from an earlier try, or
        one Shipwright made but never recorded (see Observer._unrecorded_run), or
        someone else's."""
        existing = await self.kube.get_or_none(executor.resource,
                                               buildrun["metadata"]["namespace"], name)
        if existing is None:
            # Gone between the create's AlreadyExists and this read (the garbage collector
            # after its BuildRun's deletion, or a user): a lost race, tried again; was
            # counted a panic (found by the interleavings machine).
            raise RetryableError("conflict", f"{executor.kind} {name!r} existed and is gone")
        if not owned_by(existing, buildrun):
            raise UserError(reasons.TASK_RUN_GENERATION_FAILED,
                            f"{executor.kind} {name!r} exists but belongs to another object")
        return existing

    async def delete(self, buildrun: JSON) -> None:
        """Retention: the preconditions make sure a recreated namesake is never deleted."""
        meta = buildrun["metadata"]
        try:
            await self.kube.delete(BUILDRUNS, meta["namespace"], meta["name"], preconditions={
                "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
        except ApiError as exc:
            if not is_not_found(exc):
                raise
        metrics.DELETED.inc()
        log.info("deleted BuildRun after its retention TTL",
                 extra={"key": f"{meta['namespace']}/{meta['name']}"})

    async def _delete_service_account(self, service_account: JSON) -> None:
        """Row 3: the generated ServiceAccount goes once its BuildRun is done. The uid
        precondition spares a namesake created since."""
        meta = service_account["metadata"]
        try:
            await self.kube.delete(SERVICEACCOUNTS, meta["namespace"], meta["name"],
                                   preconditions={"uid": meta["uid"]})
        except ApiError as exc:
            if is_conflict(exc) and await reread(self.kube, SERVICEACCOUNTS,
                                                 service_account) is not None:
                # Still the one decided on: the conflict was not its namesake's
                # precondition failing, so it is tried again (swallowed, it left the
                # ServiceAccount for good, nothing else waking the BuildRun: found by the
                # interleavings machine).
                raise RetryableError("conflict", f"ServiceAccount {meta['name']!r} could "
                                     f"not be deleted: {exc.message}") from exc
            if not (is_not_found(exc) or is_conflict(exc)):
                raise
        log.info("deleted the ServiceAccount generated for the BuildRun",
                 extra={"key": f"{meta['namespace']}/{meta['name']}"})

    async def _progress(self, buildrun: JSON, run: JSON, pod: JSON | None) -> JSON | None:
        """Row 21: the run's reason and message (why it waits, in its pod's words where
        they say more: `running_reason`), and its startTime once Tekton set it. A message
        that differs only in its volatile parts (a back-off's duration, a timestamp:
        `same_meaning`) is no change: a pod's every update would cost a write."""
        reason, message = running_reason(run, pod)
        status = buildrun.get("status") or {}
        current = succeeded_condition(status) or {}
        if (current.get("reason") == reason
                and same_meaning(text(current.get("message")), message)
                and (status.get("startTime") or not run_start(run))):
            return None
        now = format_time(self.clock())
        written = await write_status(self.kube, buildrun, progressed(run, now, pod))
        self._established(buildrun, written)
        if written is not None and reason == reasons.RUNNING and current.get("reason") != reason:
            created = parse_time(run["metadata"].get("creationTimestamp"))
            if created is not None:
                metrics.RAMPUP.observe(max((self.clock() - created).total_seconds(), 0.0))
            self.recorder.record(buildrun, "Normal", reasons.RUNNING, message or "running")
        return written

    def _established(self, before: JSON, written: JSON | None) -> None:
        """Shipwright's establish duration, when a write gave the BuildRun its startTime."""
        if (written is None or (before.get("status") or {}).get("startTime")
                or attempts_of(before)):
            return  # (a retried run's start is not the BuildRun's establishment)
        start = parse_time((written.get("status") or {}).get("startTime"))
        created = parse_time(written["metadata"].get("creationTimestamp"))
        if start is not None and created is not None:
            metrics.buildrun_established(written, max((start - created).total_seconds(), 0.0))

    async def _finish(self, seen: Seen, buildrun: JSON, decision: Decision) -> None:
        """Writes the terminal status once; then makes sure the TaskRun (PipelineRun)
        stops."""
        run, executor = seen.run, seen.executor
        now_t = self.clock()
        now = format_time(now_t)
        written = await write_status(self.kube, buildrun, finished(decision, run, now))
        if written is None:
            return
        self._established(buildrun, written)
        meta = buildrun["metadata"]
        # Tekton's reasons are kept as the BuildRun's (as Shipwright); the label set stays
        # bounded all the same.
        label = reasons.metric_reason(decision.reason)
        metrics.COMPLETED.labels(label, meta["namespace"]).inc()
        metrics.buildrun_concluded(written, decision.succeeded == "True", label)
        if decision.reason == reasons.RECONCILER_RETRIES_EXHAUSTED:
            metrics.RETRY_EXHAUSTED.inc()
        if seen.observation.superseded_by:  # row 10: the one row that reads it and finishes
            metrics.SERIAL_SUPERSEDED.labels(meta["namespace"]).inc()
        created_at = parse_time(meta.get("creationTimestamp"))
        # From the completionTime written (the run's, when it decided), as Shipwright.
        ended = parse_time(written["status"].get("completionTime")) or now_t
        if created_at is not None:
            metrics.buildrun_finished(written, label,
                                      max((ended - created_at).total_seconds(), 0.0))
        event_type = "Normal" if decision.succeeded == "True" else "Warning"
        message = decision.message or decision.reason
        step = failed_step(decision) if self.failure_logs is not None else None
        if self.failure_logs is not None and step is not None:
            # Read once: only after the one write that finished it (a retry finds it done).
            self.recorder.record_deferred(buildrun, event_type, decision.reason,
                                          self.failure_logs.message(meta["namespace"], *step,
                                                                    message))
        else:
            self.recorder.record(buildrun, event_type, decision.reason, message)
        if seen.retry_error:
            # An infrastructure failure that an annotation that cannot be read kept from a
            # retry: said where `kubectl describe` shows it.
            self.recorder.record(buildrun, "Warning", reasons.INFRASTRUCTURE_RETRIES_INVALID,
                                 seen.retry_error)
        if run is not None and not run_finished(run) and decision.outcome is None:
            # Our verdict (a backstop, a spent budget): the run must not go on to build.
            # An outcome the run's own pod shows (it completed) needs no cancel.
            await self.cancel(executor, run)
        if run is not None and seen.rampup_pod is not None and run_finished(run):
            # Shipwright's pod ramp-up metrics, from a finished TaskRun's pod (a
            # PipelineRun's first TaskRun's) as the label-filtered pod cache holds it, as
            # Shipwright reads it: no request (a live GET here cost the API server one
            # request per finish: 0.76-0.80 of bare's finish rate, issue 34).
            shipwright_metrics.taskrun_pod_seen(written, run, seen.rampup_pod)

    async def cancel(self, executor: Executor, run: JSON) -> None:
        """Asks Tekton to stop the TaskRun (PipelineRun): `executor.cancel_patch`, as
        Shipwright's Cancel sends it, a server-side apply that takes the fields over
        (force) as field manager shipwright-build-controller, so managedFields read as
        under Shipwright. An apply to a run deleted meanwhile would create one with
        nothing but spec.status, which Tekton's webhook refuses: handled below as a run
        that finished."""
        meta = run["metadata"]
        if executor.cancelled(run):
            return
        intent = {"apiVersion": executor.resource.api_version, "kind": executor.kind,
                  "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                  **copy.deepcopy(executor.cancel_patch)}
        try:
            # Pinned to the run it was decided on: a namesake is never cancelled.
            await patch_pinned(self.kube.with_field_manager(field_managers.BUILD_CONTROLLER),
                               executor.resource, run, intent, content_type=APPLY_PATCH,
                               force=True)
        except ApiError as exc:
            # Tekton's webhook refuses any change to a finished TaskRun (400, "Once the
            # TaskRun is complete, no updates are allowed"): when Tekton finished it after
            # our read, there is nothing left to cancel. 51 such refusals in the 5,000
            # soak were retried as system errors before this check (RELIABILITY.md).
            if is_invalid(exc):
                current = await reread(self.kube, executor.resource, run)
                if current is None or run_finished(current):
                    return
            raise


# Seconds past a deadline (timeout, retention TTL) a BuildRun is looked at: a hair after
# it, so the clock has surely passed it.
WAKE_MARGIN = 0.05


def _requeue_at(remaining: float | None) -> Result:
    if remaining is None:
        return DONE
    return Result(requeue_after=remaining + WAKE_MARGIN)

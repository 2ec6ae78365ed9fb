"""Every row of the BuildRun state table (controller/buildrun/states.py), acted on, on the
in-memory API server (tests/fakekube.py), as Shipwright's buildrun_test.go does with its
fake client: the writes each row makes, and nothing else, and what it asks of the
queue. Also the conflict path, give_up and the frozen outcome. The same rows run on the
real API server and real Tekton in tests/cluster; these run in milliseconds.

The reconciler is driven only through `reconcile` and `give_up`, built in one place
(`Rig.__init__`, the `rig` fixture's), on caches filled from the fake's objects
(`Rig.sync`), so a stale cache is a test's own choice. Each test asserts the writes
made, in order, and nothing else (`FakeKube.writes`), and the Result.
"""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

import pytest

from controller.buildrun import reasons, serviceaccounts
from controller.buildrun.annotations import PENDING_TIMEOUT
from controller.buildrun.caches import UNWATCHED_POLL, Caches, slim_pod
from controller.buildrun.executors import EXECUTORS, TASKRUN_CANCELLED
from controller.buildrun.reconciler import BuildRunReconciler
from controller.buildrun.resources.phases import run_name
from controller.runtime.controller import DONE, Result
from controller.runtime.errors import RetryableError, classify
from controller.runtime.events import EventRecorder
from controller.runtime.kube import JSON, PODS, SERVICEACCOUNTS, ApiError, Resource, key_of
from controller.runtime.timestamps import format_time, parse_time
from controller.settings import QueueSettings, Settings
from controller.shipwright import field_managers
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.params import UNDEFINED_PARAMETER
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    PIPELINERUNS,
    TASKRUNS,
)
from devtools.cluster import fixtures
from tests.fakekube import Call, FakeKube
from tests.harness import metric
from tests.unit.buildrun.world import seed_namespace, tekton_status

NOW = datetime.datetime(2026, 12, 4, 1, 0, 0, tzinfo=datetime.UTC)
GRACE = Settings.timeout_grace  # the reconciler's default, --timeout-grace
DIGEST = "sha256:" + "ab" * 32


def ago(seconds: float) -> str:
    return format_time(NOW - datetime.timedelta(seconds=seconds))


class Rig:
    """A namespace with a BuildStrategy, a validated Build and the default
    ServiceAccount, and a reconciler on caches of it, at a fixed clock."""

    def __init__(self, executor: str = "TaskRun", pending_timeout: float | None = None,
                 **reconciler: Any) -> None:
        self.kube = FakeKube()
        # As setup.py wires it: no PipelineRun informer unless they are the executor.
        self.caches = Caches(unwatched=frozenset() if executor == "PipelineRun"
                             else frozenset({PIPELINERUNS}))
        recorder = EventRecorder(self.kube, "test", "test")  # type: ignore[arg-type]
        self.reconciler = BuildRunReconciler(
            self.kube, self.caches, recorder,  # type: ignore[arg-type]
            executor=EXECUTORS[executor],
            **{"clock": lambda: NOW, "pending_timeout": pending_timeout, **reconciler})
        seed_namespace(self.kube)

    def sync(self) -> None:
        """The caches catch up with the server."""
        for resource, store in ((BUILDRUNS, self.caches.buildruns),
                                (TASKRUNS, self.caches.taskruns),
                                (PIPELINERUNS, self.caches.pipelineruns),
                                (BUILDS, self.caches.builds),
                                (BUILDSTRATEGIES, self.caches.strategies),
                                (CLUSTERBUILDSTRATEGIES, self.caches.cluster_strategies),
                                (SERVICEACCOUNTS, self.caches.service_accounts),
                                (PODS, self.caches.pods)):
            for obj in store.values():
                store.remove(key_of(obj))
            if resource in self.caches.unwatched:
                continue  # no informer fills it
            for (plural, _, _), obj in self.kube.objects.items():
                if plural == f"{resource.plural}.{resource.group}":
                    # The pod informer keeps what slim_pod keeps (setup.py).
                    copied = copy.deepcopy(obj)
                    store.upsert(slim_pod(copied) if resource is PODS else copied)

    def buildrun(self, *, status: JSON | None = None, **spec: Any) -> JSON:
        obj = fixtures.buildrun("br", **spec)
        if status is not None:
            obj["status"] = status
        return self.kube.add(BUILDRUNS, obj)

    def taskrun(self, buildrun: JSON, name: str = "tr", *, spec: JSON | None = None,
                **status: Any) -> JSON:
        return self.kube.add(TASKRUNS, {
            "metadata": {"name": name, "labels": {"buildrun.shipwright.io/name": "br"},
                         "ownerReferences": [{"kind": "BuildRun", "name": "br",
                                              "uid": buildrun["metadata"]["uid"],
                                              "controller": True}]},
            "spec": spec or {}, "status": status})

    async def reconcile(self, *, sync: bool = True) -> Result:
        """One reconcile of ns/br; `sync=False` keeps the caches as the test left them."""
        if sync:
            self.sync()
        self.kube.calls.clear()
        return await self.reconciler.reconcile("ns/br")

    async def give_up(self, message: str = "webhook down") -> None:
        self.sync()
        self.kube.calls.clear()
        await self.reconciler.give_up("ns/br", RetryableError("webhook", message))

    def taskruns(self) -> list[str]:
        return [name for (plural, _, name) in self.kube.objects
                if plural == f"{TASKRUNS.plural}.{TASKRUNS.group}"]

    def stored(self) -> JSON:
        obj = self.kube.stored(BUILDRUNS, "br")
        assert obj is not None
        return obj

    def condition(self) -> JSON:
        cond = succeeded_condition(self.stored().get("status"))
        assert cond is not None
        return cond


def running(reason: str = "Running") -> list[JSON]:
    conditions: list[JSON] = tekton_status("Unknown", reason, message="m")["conditions"]
    return conditions


def succeeded() -> JSON:
    return tekton_status("True", "Succeeded", completion_time=ago(1), pod="tr-pod",
                         digest=DIGEST)


def started(**extra: Any) -> JSON:
    return {"taskRunName": "tr", "startTime": ago(30), "conditions": running(),
            "buildSpec": {}, **extra}


def finished(status: str = "False", **extra: Any) -> JSON:
    return {"taskRunName": "tr", "startTime": ago(120), "completionTime": ago(60),
            "conditions": [{"type": "Succeeded", "status": status, "reason": "Failed"}],
            **extra}


def cancel(name: str) -> Call:
    """The write that cancels TaskRun `name` (its spec.status)."""
    return ("patch", "taskruns", name, "")


CANCEL = cancel("tr")
STATUS_WRITE: Call = ("put", "buildruns", "br", "status")
LABEL_WRITE: Call = ("patch", "buildruns", "br", "")  # the Build's labels (link_to_build)


def canceled(kube: FakeKube, name: str = "tr") -> bool:
    taskrun = kube.stored(TASKRUNS, name)
    assert taskrun is not None
    return bool(taskrun["spec"].get("status") == TASKRUN_CANCELLED)


@pytest.fixture
def rig() -> Rig:
    return Rig()


# -- DONE: rows 1-4 -----------------------------------------------------------------------

async def test_row_1_a_done_buildrun_stops_its_running_taskrun(rig: Rig) -> None:
    br = rig.buildrun(status=finished())
    rig.taskrun(br, conditions=running())
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [CANCEL]
    assert canceled(rig.kube)


async def test_row_2_retention_ttl_deletes_the_buildrun_it_read(rig: Rig) -> None:
    rig.buildrun(status=finished(), retention={"ttlAfterFailed": "1m"})
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [("delete", "buildruns", "br", "")]
    assert rig.kube.stored(BUILDRUNS, "br") is None


async def test_row_2_spares_a_namesake_created_since(rig: Rig) -> None:
    rig.buildrun(status=finished(), retention={"ttlAfterFailed": "1m"})
    rig.sync()
    await rig.kube.delete(BUILDRUNS, "ns", "br")
    rig.buildrun()  # recreated: another uid
    with pytest.raises(ApiError) as refused:
        await rig.reconcile(sync=False)
    assert isinstance(classify(refused.value), RetryableError)  # the uid precondition
    assert rig.kube.writes() == [("delete", "buildruns", "br", "")]
    assert rig.stored().get("status") is None


@pytest.mark.parametrize(("live", "snapshot", "wakes_in"), [
    ("30s", "1h", None),  # lowered after it finished: due already (finished 60 s ago)
    ("2h", "5m", 7140.05),  # raised: kept, looked at again then
    (None, "5m", 240.05),  # not set on the BuildRun: the snapshot's (BuildRun over Build)
    ("2 weeks", "5m", DONE),  # set to what does not parse: kept, not deleted on a guess
], ids=["lowered", "raised", "snapshot", "unreadable"])
async def test_row_2_reads_the_live_ttl_first_as_shipwright(
        rig: Rig, live: str | None, snapshot: str, wakes_in: float | Result | None) -> None:
    """Shipwright's TTL cleanup reads spec.retention first, then status.buildSpec's."""
    retention = {"retention": {"ttlAfterFailed": live}} if live else {}
    rig.buildrun(status=finished(buildSpec={"retention": {"ttlAfterFailed": snapshot}}),
                 **retention)
    result = await rig.reconcile()
    if wakes_in is None:
        assert (result, rig.kube.writes()) == (DONE, [("delete", "buildruns", "br", "")])
    elif isinstance(wakes_in, Result):
        assert (result, rig.kube.writes()) == (wakes_in, [])
    else:
        assert result.requeue_after == pytest.approx(wakes_in)
        assert rig.kube.writes() == []


def done_with_its_generated_service_account(rig: Rig) -> JSON:
    """A finished BuildRun of `.generate` whose ServiceAccount is still there."""
    br = rig.buildrun(status=finished(), serviceAccount=".generate")
    rig.kube.add(SERVICEACCOUNTS, {"metadata": {
        "name": serviceaccounts.generated_name(br),
        "ownerReferences": [{"kind": "BuildRun", "name": "br",
                             "uid": br["metadata"]["uid"], "controller": True}]}})
    return br


async def test_row_3_the_generated_service_account_goes_once_done(rig: Rig) -> None:
    br = done_with_its_generated_service_account(rig)
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [("delete", "serviceaccounts",
                                  serviceaccounts.generated_name(br), "")]
    assert rig.kube.stored(SERVICEACCOUNTS, serviceaccounts.generated_name(br)) is None


async def test_giving_up_on_a_done_buildrun_looks_again_later(rig: Rig) -> None:
    """Its ServiceAccount's deletion kept failing: nothing else might queue it (the
    interleavings machine left one for good so), so it is looked at again, the queue's
    longest backoff on, and then row 3 deletes it."""
    br = done_with_its_generated_service_account(rig)
    rig.sync()
    again = await rig.reconciler.give_up("ns/br", RetryableError("server_error", "down"))
    assert again == Result(requeue_after=QueueSettings.max_delay)
    assert rig.kube.writes() == []
    assert await rig.reconcile() == DONE
    assert rig.kube.stored(SERVICEACCOUNTS, serviceaccounts.generated_name(br)) is None


async def test_row_3_a_namesake_service_account_the_buildrun_does_not_own_stays(
        rig: Rig) -> None:
    rig.buildrun(status=finished(), serviceAccount=".generate")
    rig.kube.add(SERVICEACCOUNTS, {"metadata": {"name": "br"}})  # the user's own
    assert await rig.reconcile() == DONE  # row 4
    assert rig.kube.writes() == []


async def test_row_4_nothing_but_a_wake_at_the_ttl_and_the_outcome_is_frozen(rig: Rig) -> None:
    br = rig.buildrun(status=finished(), retention={"ttlAfterFailed": "5m"})
    rig.taskrun(br, **succeeded())  # the TaskRun says otherwise now: too late
    before = rig.stored()
    assert (await rig.reconcile()).requeue_after == pytest.approx(240.05)
    assert rig.kube.writes() == []
    assert rig.stored() == before


# -- NEW: rows 5-12 -----------------------------------------------------------------------

async def test_row_5_giving_up_records_an_unrecorded_taskrun_then_its_outcome_counts(
        rig: Rig) -> None:
    br = rig.buildrun()
    rig.taskrun(br, run_name(br), **succeeded())
    await rig.give_up()
    assert rig.stored()["status"]["taskRunName"] == run_name(br)
    assert "completionTime" not in rig.stored()["status"]
    assert rig.kube.writes() == [STATUS_WRITE]
    # The next look is a RUNNING one: the finished run's outcome, its completionTime.
    await rig.reconcile()
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True", reasons.SUCCEEDED)
    assert rig.stored()["status"]["output"]["digest"] == DIGEST
    assert rig.stored()["status"]["completionTime"] == ago(1)
    assert rig.kube.writes() == [STATUS_WRITE]  # finished: nothing to cancel


async def test_row_6_giving_up_in_new_ends_with_the_last_error(rig: Rig) -> None:
    rig.buildrun()
    await rig.give_up("HTTP 500 failed calling webhook")
    cond = rig.condition()
    assert cond["reason"] == reasons.RECONCILER_RETRIES_EXHAUSTED
    assert "failed calling webhook" in cond["message"]
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == [STATUS_WRITE]


async def test_row_5_giving_up_never_ends_a_buildrun_whose_taskrun_runs(rig: Rig) -> None:
    """A spent budget is no verdict on a run that exists: it is recorded and followed."""
    br = rig.buildrun()
    rig.taskrun(br, run_name(br), conditions=running("Pending"))
    await rig.give_up()
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("Unknown", "Pending")
    assert rig.kube.writes() == [STATUS_WRITE]
    assert not canceled(rig.kube, run_name(br))


async def test_row_7_canceled_before_it_started(rig: Rig) -> None:
    rig.buildrun(state="BuildRunCanceled")
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.BUILD_RUN_CANCELED
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert "taskRunName" not in rig.stored()["status"]
    assert rig.kube.writes() == [STATUS_WRITE]
    assert rig.taskruns() == []


async def test_row_5_then_15_a_cancel_of_an_unrecorded_taskrun_waits_for_it(
        rig: Rig) -> None:
    """Recorded first (row 5), then asked to stop (row 18): its end decides."""
    br = rig.buildrun(state="BuildRunCanceled")
    rig.taskrun(br, run_name(br), conditions=running("Pending"))
    await rig.reconcile()
    assert rig.kube.writes() == [STATUS_WRITE]
    assert rig.stored()["status"]["taskRunName"] == run_name(br)
    await rig.reconcile()
    assert (rig.condition()["status"], rig.condition()["reason"]) == (
        "Unknown", reasons.BUILD_RUN_CANCELED)
    assert rig.kube.writes() == [STATUS_WRITE, cancel(run_name(br))]
    assert "completionTime" not in rig.stored()["status"]


# The Build's labels go on first when the Build resolved (Shipwright labels the BuildRun
# before it checks the rest); a missing or failed Build leaves none.
@pytest.mark.parametrize(("spec", "reason", "writes"), [
    ({"build": {"name": "nope"}}, reasons.BUILD_NOT_FOUND, [STATUS_WRITE]),
    ({"build": {"name": "broken"}}, reasons.BUILD_REGISTRATION_FAILED, [STATUS_WRITE]),
    ({"serviceAccount": "nobody"}, reasons.SERVICE_ACCOUNT_NOT_FOUND,
     [LABEL_WRITE, STATUS_WRITE]),
    ({"timeout": "soon"}, reasons.INVALID_TIMEOUT, [LABEL_WRITE, STATUS_WRITE]),
    ({"paramValues": [{"name": "nope", "value": "x"}]}, UNDEFINED_PARAMETER,
     [LABEL_WRITE, STATUS_WRITE]),
], ids=["missing-build", "failed-build", "missing-sa", "bad-timeout", "unknown-param"])
async def test_row_8_a_user_error_is_terminal_at_once(
        rig: Rig, spec: JSON, reason: str, writes: list[Call]) -> None:
    rig.kube.add(BUILDS, {**fixtures.build("broken"), "status": {
        "registered": "False", "reason": "BuildStrategyNotFound", "message": "no kaniko"}})
    rig.buildrun(**spec)
    assert await rig.reconcile() == DONE
    cond = rig.condition()
    assert (cond["status"], cond["reason"]) == ("False", reason)
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == writes
    assert rig.taskruns() == []
    # Terminal: neither another reconcile nor a spent budget writes again.
    assert await rig.reconcile() == DONE
    await rig.give_up()
    assert rig.kube.writes() == []


async def test_row_8_a_name_over_63_characters_fails_as_shipwrights(rig: Rig) -> None:
    """Shipwright's first check (buildrun.go, validation.IsValidLabelValue), its reason and
    apimachinery v0.36's words; no label, no TaskRun. A name that fits runs."""
    name = "s" * 64
    rig.kube.add(BUILDRUNS, fixtures.buildrun(name))
    rig.sync()
    rig.kube.calls.clear()
    assert await rig.reconciler.reconcile(f"ns/{name}") == DONE
    status = rig.kube.stored(BUILDRUNS, name)["status"]  # type: ignore[index]
    cond = succeeded_condition(status)
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", reasons.BUILD_RUN_NAME_INVALID, "must be no more than 63 bytes")
    assert status["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == [("put", "buildruns", name, "status")]
    assert rig.taskruns() == []
    fits = "s" * 63
    rig.kube.add(BUILDRUNS, fixtures.buildrun(fits))
    rig.sync()
    await rig.reconciler.reconcile(f"ns/{fits}")
    assert rig.taskruns() == [run_name(rig.kube.stored(BUILDRUNS, fits))]  # type: ignore[arg-type]


async def test_row_8_a_taskrun_tekton_refuses_is_the_users_to_fix(rig: Rig) -> None:
    br = rig.buildrun()
    rig.kube.fail("create", TASKRUNS, status=422, reason="Invalid", message="bad step")
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.TASK_RUN_GENERATION_FAILED
    assert "bad step" in rig.condition()["message"]
    assert rig.kube.writes() == [LABEL_WRITE, ("create", "taskruns", run_name(br), ""),
                                 STATUS_WRITE]
    assert rig.taskruns() == []


async def test_row_9_waits_for_the_build_to_be_validated(rig: Rig) -> None:
    rig.kube.add(BUILDS, fixtures.build("fresh"))  # no status.registered yet
    rig.buildrun(build={"name": "fresh"})
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == []
    assert rig.stored().get("status") is None


async def test_row_10_starts_labels_creates_and_records_in_one_status_write(rig: Rig) -> None:
    br = rig.buildrun(timeout="10m")
    name = run_name(br)
    rig.kube.created = format_time(NOW)  # the TaskRun's creation
    # Woken by Tekton's events; at the latest at the backstop: the timeout plus the grace.
    assert (await rig.reconcile()).requeue_after == pytest.approx(600 + GRACE + 0.05)
    assert rig.kube.writes() == [("patch", "buildruns", "br", ""),
                                 ("create", "taskruns", name, ""), STATUS_WRITE]
    status = rig.stored()["status"]
    # No startTime until Tekton starts the TaskRun: Shipwright copies the TaskRun's.
    assert status["taskRunName"] == name and "startTime" not in status
    assert status["executor"] == {"kind": "TaskRun", "name": name}
    # The Build's spec, as Shipwright records it: not the BuildRun's timeout merged in.
    assert status["buildSpec"] == rig.kube.stored(BUILDS, fixtures.BUILD)["spec"]  # type: ignore[index]
    assert "completionTime" not in status
    assert rig.stored()["metadata"]["labels"]["build.shipwright.io/name"] == fixtures.BUILD
    owner = rig.kube.stored(TASKRUNS, name)["metadata"]["ownerReferences"][0]  # type: ignore[index]
    assert owner["uid"] == br["metadata"]["uid"]


async def test_row_10_without_a_timeout_nothing_to_wake_for(rig: Rig) -> None:
    rig.buildrun()
    assert await rig.reconcile() == DONE
    assert rig.stored()["status"]["conditions"][0]["status"] == "Unknown"


async def test_row_10_creates_the_generated_service_account_before_the_taskrun(
        rig: Rig) -> None:
    br = rig.buildrun(serviceAccount=".generate")
    name = run_name(br)
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [LABEL_WRITE, ("create", "serviceaccounts", "br", ""),
                                 ("create", "taskruns", name, ""), STATUS_WRITE]
    sa = rig.kube.stored(SERVICEACCOUNTS, "br")
    assert sa is not None and sa["automountServiceAccountToken"] is False
    assert sa["metadata"]["ownerReferences"][0]["uid"] == br["metadata"]["uid"]
    assert sa["metadata"]["labels"] == {"buildrun.shipwright.io/name": "br"}
    taskrun = rig.kube.stored(TASKRUNS, name)
    assert taskrun is not None and taskrun["spec"]["serviceAccountName"] == "br"


async def test_row_10_adds_the_push_secret_to_the_service_account_keeping_its_own(
        rig: Rig) -> None:
    rig.kube.modify(SERVICEACCOUNTS, "default",
                    lambda sa: sa.update(secrets=[{"name": "theirs"}]))
    br = rig.buildrun(output={"image": fixtures.IMAGE, "pushSecret": "push"})
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [LABEL_WRITE, ("patch", "serviceaccounts", "default", ""),
                                 ("create", "taskruns", run_name(br), ""), STATUS_WRITE]
    sa = rig.kube.stored(SERVICEACCOUNTS, "default")  # a strategic merge: theirs is kept
    assert sa is not None and sa["secrets"] == [{"name": "theirs"}, {"name": "push"}]


async def test_row_10_adopts_its_own_taskrun_from_an_unrecorded_try(rig: Rig) -> None:
    br = rig.buildrun()
    rig.taskrun(br, run_name(br), conditions=running("Pending"))
    rig.sync()
    rig.caches.taskruns.remove(f"ns/{run_name(br)}")  # the watch has not said yet
    assert await rig.reconcile(sync=False) == DONE
    assert rig.kube.writes() == [LABEL_WRITE, ("create", "taskruns", run_name(br), ""),
                                 STATUS_WRITE]  # the create met AlreadyExists
    assert rig.stored()["status"]["taskRunName"] == run_name(br)
    assert rig.taskruns() == [run_name(br)]


async def test_row_5_records_a_taskrun_shipwright_made_but_never_recorded(rig: Rig) -> None:
    """Shipwright names its TaskRun with generateName and records it in a second write; a
    switch between the two leaves an owned TaskRun under a name not ours."""
    br = rig.buildrun()
    rig.taskrun(br, "br-x7k2p", conditions=running("Pending"))
    assert await rig.reconcile() == Result(requeue_after=0.05)
    assert rig.stored()["status"]["taskRunName"] == "br-x7k2p"
    assert rig.stored()["status"]["buildSpec"] == rig.kube.stored(  # type: ignore[index]
        BUILDS, fixtures.BUILD)["spec"]
    assert rig.taskruns() == ["br-x7k2p"]
    assert rig.kube.writes() == [LABEL_WRITE, STATUS_WRITE]


async def test_a_taskrun_another_buildrun_owns_is_not_adopted(rig: Rig) -> None:
    br = rig.buildrun()
    other = {**br, "metadata": {**br["metadata"], "uid": "another-uid"}}
    rig.taskrun(other, "br-x7k2p", conditions=running("Pending"))  # a namesake's, left over
    assert await rig.reconcile() == DONE
    assert rig.stored()["status"]["taskRunName"] == run_name(br)
    assert rig.kube.writes() == [LABEL_WRITE, ("create", "taskruns", run_name(br), ""),
                                 STATUS_WRITE]


async def test_a_system_error_on_start_leaves_the_outcome_open(rig: Rig) -> None:
    br = rig.buildrun()
    rig.kube.fail("create", TASKRUNS, status=500, message="failed calling webhook")
    with pytest.raises(ApiError) as raised:
        await rig.reconcile()
    error = classify(raised.value)
    assert isinstance(error, RetryableError) and error.error_class == "webhook"
    assert rig.stored().get("status") is None
    assert rig.kube.writes() == [LABEL_WRITE, ("create", "taskruns", run_name(br), "")]


# -- RUNNING: rows 13-21 ------------------------------------------------------------------

async def test_row_12_a_finished_taskruns_outcome_is_written_once(rig: Rig) -> None:
    br = rig.buildrun(status=started())
    rig.taskrun(br, **succeeded())
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.SUCCEEDED
    assert rig.stored()["status"]["output"]["digest"] == DIGEST
    # The TaskRun's completionTime, as Shipwright copies it: when the build ended, not when
    # the controller came to see it.
    assert rig.stored()["status"]["completionTime"] == ago(1)
    assert rig.condition()["lastTransitionTime"] == ago(1)
    assert rig.kube.writes() == [STATUS_WRITE]
    assert await rig.reconcile() == DONE  # DONE now: row 4, nothing written
    assert rig.kube.writes() == []


async def test_row_12_the_pod_ramp_up_metrics_come_from_the_pod_cache(rig: Rig) -> None:
    """Shipwright's two pod ramp-ups, from the label-filtered pod cache as Shipwright reads
    them: no GET of the pod per finish; none recorded when the pod is not cached."""
    br = rig.buildrun(status=started())
    tr = rig.taskrun(br, **succeeded())
    created = parse_time(tr["metadata"]["creationTimestamp"])
    assert created is not None

    def after(seconds: int) -> str:
        return format_time(created + datetime.timedelta(seconds=seconds))

    rig.kube.add(PODS, {"metadata": {"name": "tr-pod", "creationTimestamp": after(3),
                                     "labels": {"buildrun.shipwright.io/name": "br"}},
                        "spec": {"containers": [{"name": "step-build"}]},
                        "status": {"phase": "Succeeded", "initContainerStatuses": [
                            {"name": "prepare", "state": {"terminated": {
                                "finishedAt": after(8)}}}]}})
    before = (metric("build_buildrun_taskrun_rampup_duration_seconds_sum"),
              metric("build_buildrun_taskrun_pod_rampup_duration_seconds_sum"))
    assert await rig.reconcile() == DONE
    assert not [c for c in rig.kube.calls if c[1] == "pods"]
    assert (metric("build_buildrun_taskrun_rampup_duration_seconds_sum") - before[0],
            metric("build_buildrun_taskrun_pod_rampup_duration_seconds_sum") - before[1]
            ) == (3.0, 5.0)


async def test_row_12_without_its_pod_in_the_cache_no_ramp_up_and_no_get(rig: Rig) -> None:
    br = rig.buildrun(status=started())
    rig.taskrun(br, **succeeded())
    count = metric("build_buildrun_taskrun_rampup_duration_seconds_count")
    assert await rig.reconcile() == DONE
    assert rig.kube.calls and not [c for c in rig.kube.calls if c[1] == "pods"]
    assert metric("build_buildrun_taskrun_rampup_duration_seconds_count") == count


# -- next_look: what a finished BuildRun the cache brings costs ---------------------------

def test_next_look_a_finished_buildrun_needing_nothing_costs_no_reconcile(rig: Rig) -> None:
    br = rig.buildrun(status=finished())
    rig.taskrun(br, **succeeded())
    rig.sync()
    assert rig.reconciler.next_look(rig.stored()) is None
    assert rig.kube.calls == []


def test_next_look_a_retention_ttl_waits_until_due(rig: Rig) -> None:
    rig.buildrun(status=finished(), retention={"ttlAfterFailed": "5m"})
    rig.sync()
    assert rig.reconciler.next_look(rig.stored()) == pytest.approx(240.05)  # row 4's wake
    rig.buildrun(status=finished(), retention={"ttlAfterFailed": "30s"})
    assert rig.reconciler.next_look(rig.stored()) == 0.0  # row 2: due already


def test_next_look_rows_1_and_3_and_unfinished_buildruns_are_now(rig: Rig) -> None:
    br = rig.buildrun(status=finished())
    rig.taskrun(br, conditions=running())
    rig.sync()
    assert rig.reconciler.next_look(rig.stored()) == 0.0  # row 1: stop the run
    br = done_with_its_generated_service_account(rig)
    rig.sync()
    assert rig.reconciler.next_look(rig.stored()) == 0.0  # row 3: delete its account
    assert rig.reconciler.next_look(rig.buildrun()) == 0.0  # NEW
    assert rig.reconciler.next_look(rig.buildrun(status=started())) == 0.0  # RUNNING


async def test_row_13_giving_up_while_running_stops_the_taskrun(rig: Rig) -> None:
    br = rig.buildrun(status=started())
    rig.taskrun(br, conditions=running())
    await rig.give_up()
    assert rig.condition()["reason"] == reasons.RECONCILER_RETRIES_EXHAUSTED
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == [STATUS_WRITE, CANCEL]
    assert canceled(rig.kube)


async def test_giving_up_while_running_reports_a_taskrun_that_finished(rig: Rig) -> None:
    br = rig.buildrun(status=started())
    rig.taskrun(br, **succeeded())
    await rig.give_up()
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True", reasons.SUCCEEDED)
    assert rig.stored()["status"]["output"]["digest"] == DIGEST
    assert rig.kube.writes() == [STATUS_WRITE]


async def test_row_14_a_deleted_taskrun(rig: Rig) -> None:
    rig.buildrun(status=started())
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.TASK_RUN_IS_MISSING
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == [STATUS_WRITE]


async def test_row_16_a_cancel_while_running_asks_and_waits_for_the_taskrun(
        rig: Rig) -> None:
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    rig.taskrun(br, conditions=running(), podName="tr-pod")
    # Shown as Shipwright shows it; woken by Tekton's end, at the latest at the backstop.
    assert await rig.reconcile() == Result(requeue_after=GRACE + 0.05)
    cond = rig.condition()
    assert (cond["status"], cond["reason"]) == ("Unknown", reasons.BUILD_RUN_CANCELED)
    assert cond["message"] == (
        "The user requested the BuildRun to be canceled.  This BuildRun controller has "
        "requested the TaskRun be canceled.  That request has not been process by Tekton's "
        "TaskRun controller yet.")
    assert cond["lastTransitionTime"] == format_time(NOW)  # when the cancel was asked
    assert "completionTime" not in rig.stored()["status"]
    assert rig.kube.writes() == [STATUS_WRITE, CANCEL]
    assert canceled(rig.kube)
    # Tekton confirms: its end is the outcome (row 14), its completionTime the BuildRun's.
    rig.kube.modify(TASKRUNS, "tr", lambda tr: tr.update(status={
        "podName": "tr-pod", "completionTime": ago(0), "conditions": [
            {"type": "Succeeded", "status": "False", "reason": "TaskRunCancelled",
             "message": 'TaskRun "tr" was cancelled. '}]}))
    assert await rig.reconcile() == DONE
    cond = rig.condition()
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", reasons.BUILD_RUN_CANCELED,
        "The BuildRun and underlying TaskRun were canceled successfully.")
    assert rig.kube.writes() == [STATUS_WRITE]


async def test_row_16_a_cancel_too_late_the_taskrun_completed_first(rig: Rig) -> None:
    """As Shipwright: a TaskRun that completed before the cancel could be processed is a
    success, its image reported."""
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    rig.taskrun(br, **succeeded())
    await rig.reconcile()
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True",
                                                                      reasons.SUCCEEDED)
    assert rig.condition()["message"] == ("The TaskRun completed before the request to "
                                          "cancel the TaskRun could be processed.")
    assert rig.stored()["status"]["output"]["digest"] == DIGEST


def completed_pod(digest: str = DIGEST) -> JSON:
    """A run's pod whose every container exited 0, the last with its results."""
    results = json.dumps([{"key": "shp-image-digest", "value": digest, "type": 1}])
    return {"metadata": {"name": "tr-pod"},
            "spec": {"containers": [{"name": "step-build"},
                                    {"name": "step-image-processing"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "step-build", "state": {"terminated": {"exitCode": 0}}},
                {"name": "step-image-processing", "state": {"terminated": {
                    "exitCode": 0, "message": results}}}]}}


async def test_row_16_a_pod_that_completed_gets_no_cancel(rig: Rig) -> None:
    """The pod is done (its image pushed) but Tekton has not said so: a cancel sent on
    would have Tekton stop it as cancelled (it asks IsCancelled before it reads the pod)."""
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    rig.taskrun(br, conditions=running(), podName="tr-pod")
    rig.kube.add(PODS, completed_pod())
    await rig.reconcile()
    assert rig.condition()["reason"] == reasons.BUILD_RUN_CANCELED
    assert rig.kube.writes() == [STATUS_WRITE]
    assert not canceled(rig.kube)


async def test_row_12_tekton_cancelled_a_run_whose_pod_had_completed(rig: Rig) -> None:
    """Tekton stopped it as cancelled, but its pod shows the build done: the image was
    pushed, so it is a success, with the digest the step wrote (Shipwright: canceled)."""
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    rig.taskrun(br, podName="tr-pod", completionTime=ago(0), conditions=[
        {"type": "Succeeded", "status": "False", "reason": "TaskRunCancelled",
         "message": 'TaskRun "tr" was cancelled. '}])
    rig.kube.add(PODS, completed_pod("sha256:" + "cd" * 32))
    await rig.reconcile()
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True",
                                                                      reasons.SUCCEEDED)
    assert rig.stored()["status"]["output"]["digest"] == "sha256:" + "cd" * 32


def cancelled_by_tekton(rig: Rig, br: JSON, ended: str) -> None:
    """The TaskRun as Tekton leaves one it cancelled: ended, its pod deleted (tr-pod)."""
    rig.taskrun(br, spec={"status": TASKRUN_CANCELLED}, podName="tr-pod", completionTime=ended,
                conditions=[{"type": "Succeeded", "status": "False",
                             "reason": "TaskRunCancelled",
                             "message": 'TaskRun "tr" was cancelled. '}])


def pod_on_its_way_out() -> JSON:
    """tr-pod deleted by Tekton, its push step still running (the grace period)."""
    pod = completed_pod()
    pod["metadata"]["deletionTimestamp"] = ago(0)
    pod["status"]["phase"] = "Running"
    pod["status"]["containerStatuses"][-1]["state"] = {"running": {}}
    return pod


async def test_row_12_a_cancelled_taskruns_pod_still_ending_is_awaited(rig: Rig) -> None:
    """Tekton cancelled the run and deleted its pod, whose containers run on for the grace
    period: a build that ends then has pushed its image. The pod's end is awaited."""
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    cancelled_by_tekton(rig, br, ago(2))
    rig.kube.add(PODS, pod_on_its_way_out())
    # Its events wake it; at the latest the grace after the TaskRun ended.
    assert await rig.reconcile() == Result(requeue_after=GRACE - 2 + 0.05)
    assert rig.kube.writes() == []
    # It ended well, and went: its last state (as the pod informer's handler records it)
    # shows the build done, its image pushed.
    ended = completed_pod("sha256:" + "ef" * 32)
    ended["metadata"].update(namespace="ns", deletionTimestamp=ago(0))
    del rig.kube.objects[("pods.", "ns", "tr-pod")]
    rig.caches.ended_pods.record(ended)
    assert await rig.reconcile() == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True",
                                                                      reasons.SUCCEEDED)
    assert rig.stored()["status"]["output"]["digest"] == "sha256:" + "ef" * 32


async def test_row_12_a_cancelled_taskruns_pod_gone_while_running_was_killed(
        rig: Rig) -> None:
    """Deleted with a container still running (its last state, as recorded): killed, not
    ended, so nothing is awaited and the cancel is the outcome."""
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    cancelled_by_tekton(rig, br, ago(2))
    killed = pod_on_its_way_out()
    killed["metadata"]["namespace"] = "ns"
    rig.caches.ended_pods.record(killed)
    assert await rig.reconcile() == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == (
        "False", reasons.BUILD_RUN_CANCELED)


async def test_row_12_a_cancelled_taskruns_pod_that_never_ends_is_awaited_no_longer(
        rig: Rig) -> None:
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    cancelled_by_tekton(rig, br, ago(GRACE + 1))
    rig.kube.add(PODS, pod_on_its_way_out())
    assert await rig.reconcile() == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == (
        "False", reasons.BUILD_RUN_CANCELED)


async def test_row_15_the_backstop_when_tekton_never_confirms_a_cancel(rig: Rig) -> None:
    asked = started(conditions=[{"type": "Succeeded", "status": "Unknown",
                                 "reason": reasons.BUILD_RUN_CANCELED, "message": "asked",
                                 "lastTransitionTime": ago(GRACE + 1)}])
    br = rig.buildrun(status=asked, state="BuildRunCanceled")
    rig.taskrun(br, spec={"status": TASKRUN_CANCELLED}, conditions=running())
    assert await rig.reconcile() == DONE
    cond = rig.condition()
    assert (cond["status"], cond["reason"]) == ("False", reasons.BUILD_RUN_CANCELED)
    assert cond["message"] == ("the BuildRun was canceled; its TaskRun did not confirm the "
                               "cancel within --timeout-grace")
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == [STATUS_WRITE]  # asked already: no second cancel


async def test_a_cancel_writes_as_shipwrights_cancel_does(rig: Rig) -> None:
    """Shipwright's Cancel is a server-side apply by shipwright-build-controller (not the
    BuildRun reconciler's own manager), so managedFields read the same after a switch."""
    br = rig.buildrun(status=started(), state="BuildRunCanceled")
    rig.taskrun(br, conditions=running())
    await rig.reconcile()
    assert rig.kube.managers[-1] == (CANCEL, field_managers.BUILD_CONTROLLER)
    assert canceled(rig.kube)


async def test_row_17_the_backstop_when_tekton_never_ends_a_timed_out_taskrun(
        rig: Rig) -> None:
    br = rig.buildrun(status=started(startTime=ago(GRACE + 21)))
    rig.taskrun(br, spec={"timeout": "20s"}, conditions=running())
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.BUILD_RUN_TIMEOUT
    # Shipwright's words (conditions.go), which its integration suite checks.
    assert rig.condition()["message"] == \
        f"BuildRun {br['metadata']['name']} failed to finish within 20s"
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == [STATUS_WRITE, CANCEL]
    assert canceled(rig.kube)


async def test_row_17_a_pod_that_completed_is_reported_not_timed_out(rig: Rig) -> None:
    """Tekton never said so (its controller down), but the pod shows the build done: the
    backstop reports the success and the image, as Tekton would have."""
    br = rig.buildrun(status=started(startTime=ago(GRACE + 21)))
    rig.taskrun(br, spec={"timeout": "20s"}, conditions=running(), podName="tr-pod")
    rig.kube.add(PODS, completed_pod())
    assert await rig.reconcile() == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True",
                                                                      reasons.SUCCEEDED)
    assert rig.stored()["status"]["output"]["digest"] == DIGEST


def stale_cache_then(rig: Rig, br: JSON, spec: JSON, **server: Any) -> None:
    """The caches hold the TaskRun still running; the API server, its `server` status
    since (the TaskRun watch behind)."""
    rig.taskrun(br, spec=spec, conditions=running())
    rig.sync()
    rig.taskrun(br, spec=spec, **server)


async def test_row_17_reads_the_taskrun_live_first_its_own_end_decides(rig: Rig) -> None:
    """The watch lags by more than the grace: the cache says the run is still going past
    the backstop, the API server has its success. The run decides, with its completionTime,
    and nothing is cancelled (found by the interleavings machine, its long run)."""
    br = rig.buildrun(status=started(startTime=ago(GRACE + 21)))
    stale_cache_then(rig, br, {"timeout": "20s"}, **succeeded())
    assert await rig.reconcile(sync=False) == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True",
                                                                      reasons.SUCCEEDED)
    assert rig.stored()["status"]["completionTime"] == ago(1)  # the run's, not NOW
    assert rig.kube.writes() == [STATUS_WRITE]
    assert not canceled(rig.kube)


async def test_row_15_reads_the_taskrun_live_first_its_own_end_decides(rig: Rig) -> None:
    asked = started(conditions=[{"type": "Succeeded", "status": "Unknown",
                                 "reason": reasons.BUILD_RUN_CANCELED, "message": "asked",
                                 "lastTransitionTime": ago(GRACE + 1)}])
    br = rig.buildrun(status=asked, state="BuildRunCanceled")
    stale_cache_then(rig, br, {"status": TASKRUN_CANCELLED}, **succeeded())
    assert await rig.reconcile(sync=False) == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True",
                                                                      reasons.SUCCEEDED)
    assert rig.stored()["status"]["completionTime"] == ago(1)


async def test_row_13_giving_up_reads_the_taskrun_live_first(rig: Rig) -> None:
    br = rig.buildrun(status=started())
    stale_cache_then(rig, br, {}, **succeeded())
    rig.kube.calls.clear()
    await rig.reconciler.give_up("ns/br", RetryableError("webhook", "webhook down"))
    assert (rig.condition()["status"], rig.condition()["reason"]) == ("True",
                                                                      reasons.SUCCEEDED)
    assert rig.kube.writes() == [STATUS_WRITE]


async def test_row_17_counts_from_the_taskruns_creation_while_tekton_never_started_it(
        rig: Rig) -> None:
    """No startTime anywhere (Tekton's controller is down): the backstop still comes, from
    the TaskRun's creation (an hour ago here)."""
    status = started()
    del status["startTime"]
    br = rig.buildrun(status=status)
    rig.taskrun(br, spec={"timeout": "10m"})
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.BUILD_RUN_TIMEOUT
    assert "startTime" not in rig.stored()["status"]  # Tekton never gave one
    assert rig.kube.writes() == [STATUS_WRITE, CANCEL]


async def test_tekton_ends_a_timed_out_taskrun_our_deadline_waits_the_grace(rig: Rig) -> None:
    """Past the timeout, within the grace: Tekton's to end (TaskRunTimeout); nothing is
    written, the backstop awaited. Then Tekton's verdict is the BuildRun's (row 14)."""
    br = rig.buildrun(status=started())  # started 30 s ago
    rig.taskrun(br, spec={"timeout": "20s"}, conditions=running())
    assert (await rig.reconcile()).requeue_after == pytest.approx(GRACE - 10 + 0.05)
    assert rig.kube.writes() == []
    rig.kube.objects.clear()
    br = rig.buildrun(status=started())
    rig.kube.add(TASKRUNS, {
        "metadata": {"name": "tr", "labels": {"buildrun.shipwright.io/name": "br"},
                     "ownerReferences": [{"kind": "BuildRun", "name": "br",
                                          "uid": br["metadata"]["uid"], "controller": True}]},
        "spec": {"timeout": "20s"},
        "status": {"startTime": ago(30), "completionTime": ago(9), "conditions": [
            {"type": "Succeeded", "status": "False", "reason": "TaskRunTimeout",
             "message": 'TaskRun "tr" failed to finish within "20s"'}]}})
    assert await rig.reconcile() == DONE
    assert (rig.condition()["reason"], rig.condition()["message"]) == (
        reasons.BUILD_RUN_TIMEOUT, "BuildRun br failed to finish within 20s")
    assert rig.kube.writes() == [STATUS_WRITE]  # nothing to cancel: Tekton ended it


async def test_row_19_progress_is_written_and_the_deadline_awaited(rig: Rig) -> None:
    br = rig.buildrun(status=started(conditions=running("Pending")))
    rig.taskrun(br, spec={"timeout": "10m"}, conditions=running("Running"))
    assert (await rig.reconcile()).requeue_after == pytest.approx(570 + GRACE + 0.05)
    assert rig.condition()["reason"] == reasons.RUNNING
    assert "completionTime" not in rig.stored()["status"]
    assert rig.kube.writes() == [STATUS_WRITE]
    assert (await rig.reconcile()).requeue_after == pytest.approx(570 + GRACE + 0.05)
    assert rig.kube.writes() == []  # the same again: nothing to write


async def test_row_19_copies_the_taskruns_start_time_as_shipwright(rig: Rig) -> None:
    """Shipwright's BuildRun startTime is its executor's (buildrun.go): written by the
    first look after Tekton started the TaskRun, even with nothing else to say, once."""
    status = started(conditions=running("Pending"))
    del status["startTime"]
    br = rig.buildrun(status=status)
    rig.taskrun(br, conditions=running("Pending"), startTime=ago(12))
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == [STATUS_WRITE]
    assert rig.stored()["status"]["startTime"] == ago(12)
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == []


# -- why a build waits (issue 43): Tekton's reason, its pod's words, the pending deadline --

UNSCHEDULABLE = "0/1 nodes are available: 1 Insufficient cpu."


def waiting_pod(*, scheduled: str | None = None, image: str | None = None) -> JSON:
    """The TaskRun's pod as the scheduler (`scheduled`: its message) or the kubelet
    (`image`: a step's waiting message, ImagePullBackOff) leave one that cannot start."""
    status: JSON = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False" if scheduled else "True",
         **({"reason": "Unschedulable", "message": scheduled} if scheduled else {})}]}
    if image is not None:
        status["containerStatuses"] = [{"name": "step-build", "state": {"waiting": {
            "reason": "ImagePullBackOff", "message": image}}}]
    return {"metadata": {"name": "tr-pod", "labels": {"buildrun.shipwright.io/name": "br"}},
            "status": status}


def waiting(reason: str, message: str = "m") -> list[JSON]:
    conditions: list[JSON] = tekton_status("Unknown", reason, message=message)["conditions"]
    return conditions


async def test_row_19_keeps_tektons_reason_with_the_schedulers_words(rig: Rig) -> None:
    br = rig.buildrun(status=started(conditions=running("Pending")))
    rig.taskrun(br, conditions=waiting("ExceededNodeResources",
                                       "TaskRun Pod exceeded available resources"),
                podName="tr-pod")
    rig.kube.add(PODS, waiting_pod(scheduled=UNSCHEDULABLE))
    await rig.reconcile()
    assert (rig.condition()["status"], rig.condition()["reason"],
            rig.condition()["message"]) == (
        "Unknown", "ExceededNodeResources", f"FailedScheduling: {UNSCHEDULABLE}")
    assert rig.kube.writes() == [STATUS_WRITE]
    await rig.reconcile()
    assert rig.kube.writes() == []  # nothing new


async def test_row_19_writes_once_per_change_of_meaning_not_per_pod_update(rig: Rig) -> None:
    br = rig.buildrun(status=started(conditions=running("Pending")))
    rig.taskrun(br, conditions=waiting("PullImageFailed"), podName="tr-pod")
    rig.kube.add(PODS, waiting_pod(image='Back-off 10s pulling image "r/x:1"'))
    await rig.reconcile()
    assert rig.condition()["message"] == (
        'ImagePullBackOff (step-build): Back-off 10s pulling image "r/x:1"')
    assert rig.kube.writes() == [STATUS_WRITE]
    # The back-off's duration moves: the same meaning, no write.
    rig.kube.add(PODS, waiting_pod(image='Back-off 20s pulling image "r/x:1"'))
    await rig.reconcile()
    assert rig.kube.writes() == []
    # Scheduled again elsewhere, now unschedulable: a new meaning, one write.
    rig.kube.add(PODS, waiting_pod(scheduled=UNSCHEDULABLE))
    await rig.reconcile()
    assert rig.condition()["message"] == f"FailedScheduling: {UNSCHEDULABLE}"
    assert rig.kube.writes() == [STATUS_WRITE]
    # Running: Tekton's words again, and the Running Event.
    rig.kube.modify(TASKRUNS, "tr", lambda tr: tr["status"].update(conditions=running()))
    await rig.reconcile()
    assert (rig.condition()["reason"], rig.condition()["message"]) == (reasons.RUNNING, "m")


def pending_run(rig: Rig, br: JSON, created: float, **status: Any) -> None:
    """The BuildRun's TaskRun, created `created` seconds ago, waiting (Tekton's Pending)."""
    rig.kube.created = ago(created)
    rig.taskrun(br, spec={"timeout": "1h"}, conditions=waiting("Pending", "waiting"),
                **status)


async def test_row_18_the_pending_deadline_ends_a_run_that_never_ran_and_stops_it() -> None:
    rig = Rig(pending_timeout=60)
    br = rig.buildrun(status=started(conditions=running("Pending")))
    pending_run(rig, br, 61, podName="tr-pod")
    rig.kube.add(PODS, waiting_pod(scheduled=UNSCHEDULABLE))
    assert await rig.reconcile() == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == (
        "False", reasons.BUILD_RUN_PENDING_TIMEOUT)
    assert rig.condition()["message"] == (
        "BuildRun br did not start running within 1m0s; it waited: Pending: "
        f"FailedScheduling: {UNSCHEDULABLE}")
    assert rig.stored()["status"]["completionTime"] == format_time(NOW)
    assert rig.kube.writes() == [STATUS_WRITE, CANCEL]
    assert canceled(rig.kube)
    assert metric("buildrun_completed_total", reason=reasons.BUILD_RUN_PENDING_TIMEOUT,
                  namespace="ns") >= 1


async def test_row_18_the_reconciler_wakes_at_the_pending_deadline() -> None:
    rig = Rig(pending_timeout=60)
    br = rig.buildrun(status=started(conditions=running("Pending")))
    pending_run(rig, br, 20)
    # 40 s left of the pending timeout: sooner than the timeout backstop (1 h + grace).
    assert (await rig.reconcile()).requeue_after == pytest.approx(40 + 0.05)


async def test_row_18_reads_the_taskrun_live_first_a_run_that_started_goes_on() -> None:
    """The cache says the run still waits past the deadline; the API server, that it runs:
    no verdict (it cannot be taken back), and no deadline any more."""
    rig = Rig(pending_timeout=60)
    br = rig.buildrun(status=started(conditions=running("Pending")))
    pending_run(rig, br, 61)
    rig.sync()
    rig.kube.modify(TASKRUNS, "tr", lambda tr: tr["status"].update(conditions=running()))
    # Only the timeout backstop is left (from the BuildRun's startTime, 30 s ago).
    assert (await rig.reconcile(sync=False)).requeue_after == pytest.approx(
        3600 + GRACE - 30 + 0.05)
    assert rig.condition()["reason"] == reasons.RUNNING
    assert not canceled(rig.kube)


def annotate(rig: Rig, resource: Resource, name: str, value: str) -> None:
    rig.kube.modify(resource, name, lambda obj: obj["metadata"].setdefault(
        "annotations", {}).update({PENDING_TIMEOUT: value}))


@pytest.mark.parametrize(("flag", "on_build", "on_buildrun", "ends"), [
    (None, None, None, False),  # off by default
    (None, "1m", None, True),  # the Build's, for its BuildRuns
    (None, "2m", "1m", True),  # the BuildRun's wins over the Build's
    (60.0, None, "0s", False),  # ... and over the flag: 0s is none
    (600.0, "1m", None, True),  # the Build's wins over the flag
    (60.0, None, None, True),
    (60.0, "soon", None, True),  # a value made bad since the start: the flag's
], ids=["off", "build", "buildrun-over-build", "zero-over-flag", "build-over-flag", "flag",
        "bad-since"])
async def test_row_18_which_pending_timeout(flag: float | None, on_build: str | None,
                                            on_buildrun: str | None, ends: bool) -> None:
    rig = Rig(pending_timeout=flag)
    br = rig.buildrun(status=started(conditions=running("Pending")))
    pending_run(rig, br, 61)
    if on_build is not None:
        annotate(rig, BUILDS, br["spec"]["build"]["name"], on_build)
    if on_buildrun is not None:
        annotate(rig, BUILDRUNS, "br", on_buildrun)
    await rig.reconcile()
    assert (rig.condition()["reason"] == reasons.BUILD_RUN_PENDING_TIMEOUT) is ends
    assert canceled(rig.kube) is ends


async def test_row_18_a_run_that_runs_has_no_pending_deadline() -> None:
    rig = Rig(pending_timeout=60)
    br = rig.buildrun(status=started())
    rig.kube.created = ago(600)
    rig.taskrun(br, spec={"timeout": "1h"}, conditions=running())
    await rig.reconcile()
    assert rig.condition()["reason"] == reasons.RUNNING
    assert not canceled(rig.kube)


@pytest.mark.parametrize(("where", "named"), [(BUILDRUNS, "BuildRun 'br'"),
                                              (BUILDS, "Build 'app'")])
async def test_row_8_a_pending_timeout_that_is_no_duration_fails_the_start(
        rig: Rig, where: Resource, named: str) -> None:
    br = rig.buildrun()
    annotate(rig, where, "br" if where is BUILDRUNS else br["spec"]["build"]["name"],
             "soon")
    assert await rig.reconcile() == DONE
    assert (rig.condition()["status"], rig.condition()["reason"]) == (
        "False", reasons.INVALID_PENDING_TIMEOUT)
    assert rig.condition()["message"].startswith(
        f"{named}: annotation {PENDING_TIMEOUT}: invalid duration 'soon'")
    assert rig.taskruns() == []


# -- conflicts ----------------------------------------------------------------------------

async def test_a_conflict_reads_again_and_applies_the_change_anew(rig: Rig) -> None:
    br = rig.buildrun(status=started(conditions=running("Pending")))
    rig.taskrun(br, conditions=running("Running"))
    rig.sync()
    # Someone writes after our cache saw it: our write carries a stale resourceVersion.
    rig.kube.modify(BUILDRUNS, "br", lambda obj: obj["metadata"].update(labels={"x": "y"}))
    assert await rig.reconcile(sync=False) == DONE
    assert rig.kube.calls == [STATUS_WRITE, ("get", "buildruns", "br", ""), STATUS_WRITE]
    assert rig.condition()["reason"] == reasons.RUNNING
    assert rig.stored()["metadata"]["labels"] == {"x": "y"}  # theirs kept


async def test_a_conflict_that_lasts_five_tries_is_a_system_error(rig: Rig) -> None:
    br = rig.buildrun(status=started(conditions=running("Pending")))
    rig.taskrun(br, conditions=running("Running"))
    rig.kube.fail("put", BUILDRUNS, status=409, reason="Conflict", times=5)
    with pytest.raises(ApiError) as raised:
        await rig.reconcile()
    assert [c for c in rig.kube.calls if c == STATUS_WRITE] == [STATUS_WRITE] * 5
    error = classify(raised.value)
    assert isinstance(error, RetryableError) and error.error_class == "conflict"
    assert rig.condition()["reason"] == "Pending"


async def test_a_conflict_on_a_buildrun_finished_meanwhile_writes_nothing(rig: Rig) -> None:
    br = rig.buildrun(status=started())
    rig.taskrun(br, **succeeded())
    rig.sync()
    # Another writer finished it first (our cache has not seen that).
    rig.kube.modify(BUILDRUNS, "br", lambda obj: obj.update(status=finished()))
    assert await rig.reconcile(sync=False) == DONE
    assert rig.kube.writes() == [STATUS_WRITE]  # refused (409); the re-read finds it done
    assert rig.stored()["status"] == finished()


async def test_a_conflict_while_labelling_reads_again_and_labels_once(rig: Rig) -> None:
    rig.buildrun()
    rig.kube.fail("patch", BUILDRUNS, status=409, reason="Conflict", subresource="")
    assert await rig.reconcile() == DONE
    assert rig.kube.calls[:3] == [LABEL_WRITE, ("get", "buildruns", "br", ""), LABEL_WRITE]
    assert rig.stored()["metadata"]["labels"]["build.shipwright.io/name"] == fixtures.BUILD
    assert rig.kube.writes()[-1] == STATUS_WRITE


# -- the frozen outcome: no status write once completionTime is set -------------------------

@pytest.mark.parametrize("world", ["canceled", "taskrun-missing", "deadline-passed",
                                   "taskrun-succeeded", "taskrun-failed"])
async def test_a_done_buildruns_status_is_never_written(rig: Rig, world: str) -> None:
    spec: JSON = {"state": "BuildRunCanceled"} if world == "canceled" else {}
    br = rig.buildrun(status=finished(buildSpec={"timeout": "1s"}), **spec)
    if world == "taskrun-succeeded":
        rig.taskrun(br, **succeeded())
    elif world != "taskrun-missing":
        rig.taskrun(br, conditions=[{"type": "Succeeded", "status": "False",
                                     "reason": "Failed"}], completionTime=ago(60))
    before = rig.stored()
    assert await rig.reconcile() == DONE
    assert rig.kube.writes() == []
    assert rig.stored() == before


async def test_giving_up_on_a_done_buildrun_leaves_it_be(rig: Rig) -> None:
    br = rig.buildrun(status=finished())
    rig.taskrun(br, conditions=running())
    before = rig.stored()
    await rig.give_up()
    assert rig.kube.writes() == []
    assert rig.stored() == before


# -- the PipelineRun executor (BUILDRUN_EXECUTOR=PipelineRun) ------------------------------
#
# The same rows, run as a PipelineRun: what differs is what is created, cancelled and read
# (its TaskRuns, through status.childReferences), and the status naming it.

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


@pytest.fixture
def prig() -> Rig:
    return Rig(executor="PipelineRun")


def pr_started(name: str = "pr") -> JSON:
    """A RUNNING BuildRun's status as Shipwright writes it for a PipelineRun: no taskRunName."""
    return {"executor": {"kind": "PipelineRun", "name": name}, "startTime": ago(30),
            "conditions": running(), "buildSpec": {}}


def add_pipelinerun(rig: Rig, buildrun: JSON, name: str = "pr", *,
                    children: tuple[str, ...] = (), timeout: str = "1h0m0s",
                    **status: Any) -> JSON:
    refs = [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": c,
             "pipelineTaskName": c.removeprefix(f"{name}-")} for c in children]
    if refs:
        status = {**status, "childReferences": refs}
    return rig.kube.add(PIPELINERUNS, {
        "metadata": {"name": name, "labels": {"buildrun.shipwright.io/name": "br"},
                     "ownerReferences": [{"kind": "BuildRun", "name": "br",
                                          "uid": buildrun["metadata"]["uid"],
                                          "controller": True}]},
        "spec": {"timeouts": {"pipeline": timeout}}, "status": status})


def add_child(rig: Rig, name: str, pr: str = "pr", **status: Any) -> JSON:
    """A TaskRun of PipelineRun `pr`: owned by it, with the BuildRun label Tekton copies."""
    return rig.kube.add(TASKRUNS, {
        "metadata": {"name": name, "labels": {"buildrun.shipwright.io/name": "br"},
                     "ownerReferences": [{"kind": "PipelineRun", "name": pr, "uid": "pr-uid",
                                          "controller": True}]},
        "spec": {}, "status": status})


def pipelineruns(rig: Rig) -> list[str]:
    return [name for (plural, _, name) in rig.kube.objects
            if plural == f"{PIPELINERUNS.plural}.{PIPELINERUNS.group}"]


def pr_cancelled(rig: Rig, name: str = "pr") -> bool:
    pr = rig.kube.stored(PIPELINERUNS, name)
    assert pr is not None
    return bool(pr["spec"] == {**pr["spec"], "status": "Cancelled"}
                and "statusMessage" not in pr["spec"])


PR_CANCEL: Call = ("patch", "pipelineruns", "pr", "")


async def test_pipelinerun_row_10_creates_a_pipelinerun_and_names_it_as_shipwright(
        prig: Rig) -> None:
    br = prig.buildrun(timeout="10m")
    name = run_name(br)
    prig.kube.created = format_time(NOW)  # the PipelineRun's creation
    assert (await prig.reconcile()).requeue_after == pytest.approx(600 + GRACE + 0.05)
    assert prig.kube.writes() == [LABEL_WRITE, ("create", "pipelineruns", name, ""),
                                  STATUS_WRITE]
    status = prig.stored()["status"]
    assert status["executor"] == {"kind": "PipelineRun", "name": name}
    assert "taskRunName" not in status  # Shipwright writes it for a TaskRun only
    assert "startTime" not in status  # the PipelineRun's, once Tekton has started it
    assert (prig.condition()["status"], prig.condition()["reason"]) == ("Unknown", "Pending")
    assert f"PipelineRun {name}" in prig.condition()["message"]
    assert pipelineruns(prig) == [name] and prig.taskruns() == []
    pr = prig.kube.stored(PIPELINERUNS, name)
    assert pr is not None and pr["metadata"]["ownerReferences"][0]["uid"] == \
        br["metadata"]["uid"]
    # RUNNING from now on: the next reconcile follows the PipelineRun, creates nothing.
    assert (await prig.reconcile()).requeue_after == pytest.approx(600 + GRACE + 0.05)
    assert prig.kube.writes() == []


async def test_pipelinerun_row_10_adopts_its_own_from_an_unrecorded_try(prig: Rig) -> None:
    br = prig.buildrun()
    add_pipelinerun(prig, br, run_name(br), conditions=running("Started"))
    prig.sync()
    prig.caches.pipelineruns.remove(f"ns/{run_name(br)}")  # the watch has not said yet
    # Woken at the latest at the backstop: the PipelineRun's own hour (timeouts.pipeline),
    # from its creation an hour ago, plus the grace.
    assert await prig.reconcile(sync=False) == Result(requeue_after=GRACE + 0.05)
    assert prig.kube.writes() == [LABEL_WRITE, ("create", "pipelineruns", run_name(br), ""),
                                  STATUS_WRITE]  # AlreadyExists: adopted
    assert prig.stored()["status"]["executor"]["name"] == run_name(br)
    assert pipelineruns(prig) == [run_name(br)]


async def test_pipelinerun_row_5_records_one_shipwright_made_but_never_recorded(
        prig: Rig) -> None:
    br = prig.buildrun()
    add_pipelinerun(prig, br, "br-x7k2p", conditions=running("Started"))
    add_child(prig, "br-x7k2p-source-acquisition", "br-x7k2p")  # Tekton's, not ours to adopt
    assert await prig.reconcile() == Result(requeue_after=0.05)
    assert prig.stored()["status"]["executor"] == {"kind": "PipelineRun", "name": "br-x7k2p"}
    assert pipelineruns(prig) == ["br-x7k2p"]


async def test_pipelinerun_another_object_owns_is_not_adopted(prig: Rig) -> None:
    br = prig.buildrun()
    other = {**br, "metadata": {**br["metadata"], "uid": "another-uid"}}
    add_pipelinerun(prig, other, run_name(br))
    prig.sync()
    prig.caches.pipelineruns.remove(f"ns/{run_name(br)}")
    assert await prig.reconcile(sync=False) == DONE
    cond = prig.condition()
    assert cond["reason"] == reasons.TASK_RUN_GENERATION_FAILED
    assert cond["message"] == (f"PipelineRun {run_name(br)!r} exists but belongs to "
                               "another object")


async def test_pipelinerun_row_12_the_outcome_from_its_taskruns(prig: Rig) -> None:
    br = prig.buildrun(status=pr_started())
    add_pipelinerun(prig, br, children=("pr-source", "pr-build", "pr-output"), conditions=[
        {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "done"}])
    add_child(prig, "pr-source", results=[{"name": "shp-source-default-commit-sha",
                                           "value": "abc"}])
    add_child(prig, "pr-build")
    add_child(prig, "pr-output", results=[{"name": "shp-image-digest", "value": DIGEST}])
    assert await prig.reconcile() == DONE
    assert prig.kube.writes() == [STATUS_WRITE]
    status = prig.stored()["status"]
    assert (prig.condition()["status"], prig.condition()["reason"]) == ("True", "Succeeded")
    assert status["output"] == {"digest": DIGEST}
    assert status["source"]["git"] == {"commitSha": "abc"}
    assert status["executor"] == {"kind": "PipelineRun", "name": "pr"}
    assert "taskRunName" not in status


async def test_pipelinerun_row_12_a_failure_reads_the_failed_taskruns_pod(prig: Rig) -> None:
    br = prig.buildrun(status=pr_started())
    failed = [{"type": "Succeeded", "status": "False", "reason": "Failed", "message": "x"}]
    add_pipelinerun(prig, br, children=("pr-source", "pr-build"), conditions=failed,
                    completionTime="2026-01-01T00:00:00Z")
    add_child(prig, "pr-source", conditions=[{"type": "Succeeded", "status": "True"}],
              podName="pr-source-pod")
    add_child(prig, "pr-build", conditions=failed, podName="pr-build-pod", steps=[
        {"name": "build", "container": "step-build", "terminated": {"exitCode": 3}}])
    prig.kube.add(PODS, {"metadata": {"name": "pr-build-pod"},
                         "spec": {"containers": [{"name": "step-build"}]},
                         "status": {"reason": "Evicted", "message": "The node was low",
                                    "containerStatuses": [{"name": "step-build", "state": {
                                        "terminated": {"exitCode": 137}}}]}})
    assert await prig.reconcile() == DONE
    assert ("get", "pods", "pr-build-pod", "") in prig.kube.calls
    cond = prig.condition()
    assert (cond["status"], cond["reason"]) == ("False", reasons.POD_EVICTED)
    assert prig.stored()["status"]["failureDetails"]["location"] == {
        "pod": "pr-build-pod", "container": "step-build"}


async def test_pipelinerun_row_14_a_deleted_pipelinerun(prig: Rig) -> None:
    prig.buildrun(status=pr_started())
    assert await prig.reconcile() == DONE
    assert (prig.condition()["reason"], prig.condition()["message"]) == (
        reasons.TASK_RUN_IS_MISSING, "the PipelineRun was deleted before it finished")


async def test_pipelinerun_row_16_a_cancel_cancels_the_pipelinerun(prig: Rig) -> None:
    br = prig.buildrun(status=pr_started(), state="BuildRunCanceled")
    add_pipelinerun(prig, br, conditions=running())
    assert await prig.reconcile() == Result(requeue_after=GRACE + 0.05)
    assert (prig.condition()["status"], prig.condition()["reason"]) == (
        "Unknown", reasons.BUILD_RUN_CANCELED)
    assert "PipelineRun be canceled" in prig.condition()["message"]
    assert prig.kube.writes() == [STATUS_WRITE, PR_CANCEL]
    assert pr_cancelled(prig)  # spec.status Cancelled, as Shipwright's Cancel


async def test_pipelinerun_row_17_a_timeout_cancels_the_pipelinerun(prig: Rig) -> None:
    br = prig.buildrun(status={**pr_started(), "startTime": ago(GRACE + 31)})
    add_pipelinerun(prig, br, timeout="30s", conditions=running())
    assert await prig.reconcile() == DONE
    assert (prig.condition()["reason"], prig.condition()["message"]) == (
        reasons.BUILD_RUN_TIMEOUT, "BuildRun br failed to finish within 30s")
    assert prig.kube.writes() == [STATUS_WRITE, PR_CANCEL]
    assert pr_cancelled(prig)


async def test_pipelinerun_row_1_a_done_buildrun_stops_its_running_pipelinerun(
        prig: Rig) -> None:
    br = prig.buildrun(status={**pr_started(), "completionTime": ago(5), "conditions": [
        {"type": "Succeeded", "status": "False", "reason": "Failed"}]})
    add_pipelinerun(prig, br, conditions=running())
    assert await prig.reconcile() == DONE
    assert prig.kube.writes() == [PR_CANCEL]
    assert pr_cancelled(prig)
    assert await prig.reconcile() == DONE  # asked already: not again
    assert prig.kube.writes() == []


async def test_pipelinerun_giving_up_stops_it(prig: Rig) -> None:
    br = prig.buildrun(status=pr_started())
    add_pipelinerun(prig, br, conditions=running())
    await prig.give_up()
    assert prig.condition()["reason"] == reasons.RECONCILER_RETRIES_EXHAUSTED
    assert prig.kube.writes() == [STATUS_WRITE, PR_CANCEL]


async def test_a_buildrun_started_as_a_taskrun_keeps_its_taskrun_after_the_switch(
        prig: Rig) -> None:
    """BUILDRUN_EXECUTOR changed while a BuildRun ran: it is followed as what it started
    as (its status says), and finishes with its TaskRun's outcome."""
    br = prig.buildrun(status=started())
    prig.taskrun(br, **succeeded())
    assert await prig.reconcile() == DONE
    assert (prig.condition()["status"], prig.condition()["reason"]) == ("True", "Succeeded")
    assert prig.stored()["status"]["executor"] == {"kind": "TaskRun", "name": "tr"}
    assert pipelineruns(prig) == []


async def test_a_pipelinerun_left_by_a_switch_back_to_taskruns_is_followed_by_polling(
        rig: Rig) -> None:
    """With TaskRuns configured no PipelineRun informer runs: a BuildRun started as a
    PipelineRun is read with a GET and looked at again every UNWATCHED_POLL seconds
    (nothing else would wake it when the PipelineRun finishes), then ends with its
    outcome and TaskRuns as ever."""
    br = rig.buildrun(status=pr_started())
    add_pipelinerun(rig, br, conditions=running())
    result = await rig.reconcile()
    assert result.requeue_after == pytest.approx(UNWATCHED_POLL + 0.05)
    assert ("get", "pipelineruns", "pr", "") in rig.kube.calls
    assert rig.kube.writes() == []
    rig.kube.modify(PIPELINERUNS, "pr", lambda pr: pr["status"].update(
        conditions=[{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
        childReferences=[{"kind": "TaskRun", "name": "pr-output"}]))
    add_child(rig, "pr-output", results=[{"name": "shp-image-digest", "value": DIGEST}])
    assert await rig.reconcile() == DONE
    assert rig.condition()["reason"] == reasons.SUCCEEDED
    assert rig.stored()["status"]["output"]["digest"] == DIGEST


@pytest.mark.parametrize(("executor", "nodes", "reason", "writes"), [
    ("TaskRun", [], reasons.EXECUTOR_NOT_PIPELINE_RUN, [LABEL_WRITE, STATUS_WRITE]),
    ("PipelineRun", [], reasons.NODE_PLATFORM_NOT_FOUND, [LABEL_WRITE, STATUS_WRITE]),
    ("PipelineRun", [("linux", "amd64", "True", False)], reasons.NODE_PLATFORM_NOT_FOUND,
     [LABEL_WRITE, STATUS_WRITE]),
    ("PipelineRun", [("linux", "arm64", "True", True), ("linux", "arm64", "False", False),
                     ("linux", "amd64", "True", False)],
     reasons.NODE_PLATFORM_NOT_FOUND, [LABEL_WRITE, STATUS_WRITE]),
    ("PipelineRun", [("linux", "arm64", "True", False), ("linux", "amd64", "True", False)],
     reasons.PENDING, [LABEL_WRITE, ("create", "pipelineruns", "", ""), STATUS_WRITE]),
], ids=["taskrun-executor", "no-nodes", "no-arm64", "arm64-cordoned-or-not-ready", "both"])
async def test_multi_arch_needs_the_pipelinerun_executor_and_a_node_per_platform(
        executor: str, nodes: list[tuple[str, str, str, bool]], reason: str,
        writes: list[Call]) -> None:
    rig = Rig(executor=executor)
    for i, (os_, arch, ready, unschedulable) in enumerate(nodes):
        rig.kube.add(NODES, {
            "metadata": {"name": f"n{i}", "labels": {"kubernetes.io/os": os_,
                                                     "kubernetes.io/arch": arch}},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}, namespace=None)
    br = rig.buildrun(output={"image": fixtures.IMAGE, "platforms": [
        {"os": "linux", "arch": "amd64"}, {"os": "linux", "arch": "arm64"}]})
    await rig.reconcile()
    assert rig.condition()["reason"] == reason
    expected = [(v, p, n or run_name(br), s) if p == "pipelineruns" else (v, p, n, s)
                for v, p, n, s in writes]
    assert rig.kube.writes() == expected
    # Nodes are listed only with PipelineRuns, after the preflight passed.
    listed = [c for c in rig.kube.calls if c[:2] == ("list", "nodes")]
    assert len(listed) == (0 if executor == "TaskRun" else 1)

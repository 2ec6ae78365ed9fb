"""The controller's writes per BuildRun without the controller: the bodies it sends,
made by its own functions, for the benches that make them in its place.

- `label_patch`, `controller_taskrun`, `started_status`, `finished_status`: its label
  PATCH, its TaskRun, its started and its finished status (throughput.py's and
  stack_e2e.py's bare and mirror modes), sent through `as_controller`;
- `populate`: a namespace of finished BuildRuns in the shape the controller leaves them,
  each with its finished TaskRun if asked (memory.py, restart.py).
"""

from __future__ import annotations

import contextlib
import datetime
import time

from kubernetes_asyncio import client as k8s

from bench.e2e.common import NS, bounded
from controller.buildrun import serviceaccounts
from controller.buildrun.buildruns import build_link
from controller.buildrun.executors import TASKRUN
from controller.buildrun.outcomes import outcome_from_taskrun
from controller.buildrun.plan import snapshot_of
from controller.buildrun.resources.config import ShipwrightConfig
from controller.buildrun.resources.taskrun import generate_taskrun
from controller.buildrun.states import with_outcome
from controller.buildrun.status_writes import finished, started, status_update
from controller.runtime.kube import EVENTS, JSON, PODS, Kube
from controller.runtime.timestamps import format_time, now
from controller.shipwright import field_managers
from controller.shipwright.resources import BUILDRUNS, TASKRUNS
from devtools.cluster import fixtures
from devtools.fakes.tekton import TektonStatusWriter


def now_text() -> str:
    return format_time(now())


MERGE = "application/merge-patch+json"
CONFIG = ShipwrightConfig.from_env()  # the controller's, read the same way


def as_controller(kube: Kube) -> Kube:
    """`kube` writing as the BuildRun controller writes (its field manager: setup.py), so
    what the bodies make carries a controller run's managedFields entries and costs the
    API server the same merge; the BuildRun's create stays the user's (no manager named).
    Without it the mirror's ceiling was 3-4 % too high (BENCHMARKS-journal.md, 2026-12-07)."""
    return kube.with_field_manager(field_managers.BUILDRUN_CONTROLLER)


def label_patch(buildrun: JSON, build: JSON) -> JSON:
    """The metadata merge patch the controller sends before it starts a BuildRun of a
    validated Build (reconciler.build_link: the Build's name and generation labels)."""
    return {"metadata": build_link(buildrun, build)}


def controller_taskrun(buildrun: JSON, build: JSON, strategy: JSON) -> JSON:
    """The TaskRun the controller creates for `buildrun` (generate_taskrun, the same
    function; the ServiceAccount it picks when the namespace has only `default`)."""
    return generate_taskrun(buildrun, build, strategy, serviceaccounts.choose(buildrun).name,
                            CONFIG)


def started_status(buildrun: JSON, build: JSON, taskrun: JSON) -> JSON:
    """The status the controller writes once the TaskRun is created (status_writes.started,
    the same function: taskRunName, executor, the buildSpec snapshot, the Pending
    condition; no startTime until Tekton sets the TaskRun's)."""
    change = started(TASKRUN, taskrun, snapshot_of(buildrun, build), now_text())
    return change(dict(buildrun.get("status") or {}))


def finished_status(status: JSON, taskrun: JSON) -> JSON:
    """The whole status the controller writes when the TaskRun finished (status_writes.
    finished with the state table's decision for the TaskRun's outcome: the old status
    with the outcome applied, one status update)."""
    outcome = outcome_from_taskrun(taskrun)
    assert outcome is not None, "the TaskRun has finished"
    return finished(with_outcome(outcome), taskrun, now_text())(dict(status))


# What a build of a git source reports besides its digest (Shipwright's result names):
# with them the BuildRun's status carries output.size and status.source.
SOURCE_RESULTS = [{"name": name, "type": "string", "value": value} for name, value in (
    ("shp-image-size", "48213443"),
    ("shp-source-default-commit-sha", "3f858c1d4e2b6a7c9e0f1a2b3c4d5e6f7a8b9c0d"),
    ("shp-source-default-commit-author", "Jane Developer"),
    ("shp-source-default-branch-name", "main"),
    ("shp-source-default-source-timestamp", "1796425200"))]


def finished_taskrun(taskrun: JSON) -> JSON:
    """`taskrun` as TektonStatusWriter.finish leaves it (success, the image digest), with
    SOURCE_RESULTS and the startTime Tekton gives every run it starts."""
    done = format_time(datetime.datetime.now(datetime.UTC))
    return {**taskrun, "status": {
        "podName": f"{taskrun['metadata']['name']}-pod", "startTime": done,
        "completionTime": done,
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                        "message": "All Steps have completed executing",
                        "lastTransitionTime": done}],
        "results": [{"name": "shp-image-digest", "type": "string",
                     "value": "sha256:" + "ab" * 32}, *SOURCE_RESULTS],
        "steps": [{"name": "build", "container": "step-build",
                   "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": done,
                                  "finishedAt": done}}]}}


async def populate(kube: Kube, start: int, stop: int, concurrency: int, deadline: float,
                   build: JSON, strategy: JSON, taskruns: bool, *, namespace: str = NS,
                   running: bool = False, prefix: str = "br") -> float:
    """Finished BuildRuns in the shape the controller leaves them (its label PATCH, its
    started then finished status, one status write here; startTime the TaskRun's), and
    with `taskruns` each one's TaskRun, the controller's body, finished as the simulator
    finishes it. With `running` (and `taskruns`), BuildRuns whose TaskRun runs on: the
    controller's started status, the TaskRun as created, unfinished. The controller's
    writes go in as its field manager (as_controller), the create as the user's, so each
    object carries a controller run's managedFields entries (and costs the API server
    their memory)."""
    sim = TektonStatusWriter(kube)
    ctl = as_controller(kube)

    async def one(name: str) -> None:
        created = await kube.create(BUILDRUNS, namespace, fixtures.buildrun(name))
        taskrun = controller_taskrun(created, build, strategy)
        labelled = await ctl.patch(BUILDRUNS, namespace, name, label_patch(created, build))
        if running:
            taskrun = await ctl.create(TASKRUNS, namespace, taskrun)
            await ctl.patch(BUILDRUNS, namespace, name, {
                "metadata": {"resourceVersion": labelled["metadata"]["resourceVersion"]},
                "status": started_status(created, build, taskrun)}, subresource="status")
            return
        if taskruns:
            taskrun = await ctl.create(TASKRUNS, namespace, taskrun)
            done = await sim.finish(namespace, taskrun["metadata"]["name"])
            done = await kube.patch(TASKRUNS, namespace, done["metadata"]["name"], {"status": {
                "startTime": done["status"]["completionTime"],
                "results": [*done["status"]["results"], *SOURCE_RESULTS]}},
                subresource="status")
        else:
            done = finished_taskrun(taskrun)
        await ctl.patch(BUILDRUNS, namespace, name, {
            "metadata": {"resourceVersion": labelled["metadata"]["resourceVersion"]},
            "status": finished_status(started_status(created, build, taskrun), done)},
            subresource="status")

    names = [f"{prefix}-{i:06d}" for i in range(start, stop)]
    t0 = time.monotonic()
    await bounded(names, one, concurrency=concurrency, deadline=deadline)
    return time.monotonic() - t0


class Client:
    """The few calls bare/mirror (and watchers.py's writers) make, by one of two client
    libraries. The user's create names no field manager (the API server takes the
    User-Agent's, as in a controller run, where the bench creates the BuildRuns); the
    controller's writes name the BuildRun controller's, as the controller does
    (setup.py's `with_field_manager`), so the objects carry the same managedFields
    entries, and the API server merges the same."""

    def __init__(self, kube: Kube, how: str) -> None:
        self.user = kube
        self.kube = as_controller(kube)
        self.manager = str(self.kube.field_manager)
        # The controller's recorder writes as the app's Kube does (controller.app).
        self.recorder_manager = field_managers.BUILD_CONTROLLER
        self.recorder = kube.with_field_manager(self.recorder_manager)
        self.how = how
        self.custom = k8s.CustomObjectsApi(kube.api_client)
        self.core = k8s.CoreV1Api(kube.api_client)

    async def create(self, plural: str, body: JSON, *, by_user: bool = False) -> JSON:
        """Creates as the controller does, or (`by_user`) as the user, no manager named."""
        if self.how == "raw":
            res = {"buildruns": BUILDRUNS, "taskruns": TASKRUNS}[plural]
            return await (self.user if by_user else self.kube).create(res, NS, body)
        group, version = body["apiVersion"].split("/")
        if by_user:
            out: JSON = await self.custom.create_namespaced_custom_object(
                group, version, NS, plural, body)
        else:
            out = await self.custom.create_namespaced_custom_object(
                group, version, NS, plural, body, field_manager=self.manager)
        return out

    async def patch(self, plural: str, name: str, body: JSON) -> JSON:
        """A merge patch of the object itself (the label PATCH)."""
        if self.how == "raw":
            res = {"buildruns": BUILDRUNS, "taskruns": TASKRUNS}[plural]
            return await self.kube.patch(res, NS, name, body)
        out: JSON = await self.custom.patch_namespaced_custom_object(
            "shipwright.io", "v1beta1", NS, plural, name, body,
            field_manager=self.manager,
            _content_type=MERGE)  # type: ignore[call-arg]  # taken by its **kwargs
        return out

    async def update_status(self, buildrun: JSON, status: JSON) -> JSON:
        """The controller's status write: status_writes.status_update's body."""
        body, name = status_update(buildrun, status), buildrun["metadata"]["name"]
        if self.how == "raw":
            return await self.kube.put(BUILDRUNS, NS, name, body, subresource="status")
        out: JSON = await self.custom.replace_namespaced_custom_object_status(
            "shipwright.io", "v1beta1", NS, "buildruns", name, body,
            field_manager=self.manager)
        return out

    async def get_pod(self, name: str) -> None:
        """The controller's GET of a finished TaskRun's pod (its ramp-up metrics); the
        simulator makes no pod, so the answer is 404 here, as in the controller run."""
        if self.how == "raw":
            await self.kube.get_or_none(PODS, NS, name)
        else:
            with contextlib.suppress(k8s.ApiException):
                await self.core.read_namespaced_pod(name, NS)

    async def event(self, body: JSON) -> None:
        if self.how == "raw":
            await self.recorder.create(EVENTS, NS, body)
        else:
            # A dict body is serialised as is (ApiClient.sanitize_for_serialization).
            await self.core.create_namespaced_event(
                NS, body, field_manager=self.recorder_manager)  # type: ignore[arg-type]


async def start_writes(client: Client, buildrun: JSON, build: JSON, strategy: JSON) -> JSON:
    """The controller's writes when it starts `buildrun` (as created), request for request
    and body for body: the label PATCH, the TaskRun, the started status. Returns the
    BuildRun as the status write left it."""
    name = buildrun["metadata"]["name"]
    taskrun = controller_taskrun(buildrun, build, strategy)
    labelled = await client.patch("buildruns", name, label_patch(buildrun, build))
    created = await client.create("taskruns", taskrun)
    return await client.update_status(labelled, started_status(labelled, build, created))

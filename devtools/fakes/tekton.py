"""A stand-in for Tekton, where no Tekton runs (a bare LocalCluster: the end-to-end
benchmarks, the dashboard render), and for the one TaskRun state a test needs that
real Tekton never produces (tests/cluster/test_buildrun.py says which).

On a bare API server nothing would ever move a TaskRun along. This module does what
Tekton would: it
patches a TaskRun's status (Running, then Succeeded True/False with Tekton's
reasons, step states and results) through the real API server, and can
create the Pod object an eviction shows up on. The controller under test
cannot tell it from Tekton; it is never part of the controller itself.
"""

from __future__ import annotations

from typing import Literal

from controller.runtime.errors import is_already_exists
from controller.runtime.kube import JSON, PODS, SERVICEACCOUNTS, ApiError, Kube
from controller.runtime.timestamps import format_time, now
from controller.shipwright.resources import TASKRUNS

Finish = Literal["success", "failure", "timeout", "cancelled", "evicted", "oom", "error-result"]


def _condition(status: str, reason: str, message: str) -> list[JSON]:
    return [{"type": "Succeeded", "status": status, "reason": reason, "message": message,
             "lastTransitionTime": format_time(now())}]


class TektonStatusWriter:
    """Writes, when asked, the status Tekton would give one TaskRun (`start`, `finish`)
    and the evicted pod (`evict_pod`); nothing moves unless a caller asks. What drives
    every TaskRun of a namespace on its own is devtools.dashboard.simulator.TaskRunDriver.
    """

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def _status(self, namespace: str, name: str, status: JSON) -> JSON:
        return await self.kube.patch(TASKRUNS, namespace, name, {"status": status},
                                     subresource="status")

    async def start(self, namespace: str, name: str) -> JSON:
        return await self._status(namespace, name, {
            "podName": f"{name}-pod",
            "startTime": format_time(now()),
            "conditions": _condition("Unknown", "Running", "Not all Steps in the Task have "
                                     "finished executing"),
        })

    async def finish(self, namespace: str, name: str, how: Finish = "success",
                     digest: str = "sha256:" + "ab" * 32) -> JSON:
        pod = f"{name}-pod"
        step = {"name": "build", "container": "step-build"}
        at = format_time(now())
        status: JSON = {"podName": pod, "completionTime": at}
        if how == "success":
            status["conditions"] = _condition("True", "Succeeded", "All Steps have completed "
                                              "executing")
            status["results"] = [{"name": "shp-image-digest", "type": "string", "value": digest}]
            status["steps"] = [{**step, "terminated": {"exitCode": 0, "reason": "Completed",
                                                       "startedAt": at, "finishedAt": at}}]
        elif how == "timeout":
            status["conditions"] = _condition("False", "TaskRunTimeout",
                                              f"TaskRun {name} failed to finish within its timeout")
        elif how == "cancelled":
            status["conditions"] = _condition("False", "TaskRunCancelled",
                                              f"TaskRun {name} was cancelled")
        else:
            status["conditions"] = _condition("False", "Failed",
                                              '"step-build" exited with code 1')
            reason = "OOMKilled" if how == "oom" else "Error"
            status["steps"] = [{**step, "terminated": {"exitCode": 137 if how == "oom" else 1,
                                                       "reason": reason, "startedAt": at,
                                                       "finishedAt": at}}]
            if how == "error-result":
                status["results"] = [
                    {"name": "shp-error-reason", "type": "string", "value": "GitAuthFailed"},
                    {"name": "shp-error-message", "type": "string",
                     "value": "authentication to the git remote failed"},
                ]
            if how == "evicted":
                await self.evict_pod(namespace, pod)
        return await self._status(namespace, name, status)

    async def evict_pod(self, namespace: str, pod: str) -> None:
        """Creates the TaskRun's Pod object and marks it evicted, as the kubelet would."""
        try:
            # Pod admission wants the namespace's default ServiceAccount, which
            # kube-controller-manager would have created; none runs here.
            await self.kube.create(SERVICEACCOUNTS, namespace, {
                "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        except ApiError as exc:
            if not is_already_exists(exc):
                raise
        await self.kube.create(PODS, namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod},
            "spec": {"containers": [{"name": "step-build", "image": "busybox"}]},
        })
        await self.kube.patch(PODS, namespace, pod, {"status": {
            "phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory.",
        }}, subresource="status")

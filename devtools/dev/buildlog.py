"""`make dev`'s real build, told as it happens: every line its pod's step containers
print, step after step, as a "[build] <step>: <line>" activity line: what
`shp buildrun logs` shows, read the same way (the API server's pods/log, which asks the
real node's kubelet, with follow=true).

It only reads. It waits for the BuildRun's pod, then follows each step container from
the moment it starts (or has already ended) to its end; stopping it is cancelling
`run()`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import aiohttp

from controller.runtime.kube import JSON, PODS, ApiError, Kube
from controller.shipwright.labels import LABEL_BUILDRUN
from devtools.cluster.localcluster import LocalCluster

BUILD = "[build]"


class BuildLog:
    def __init__(self, kube: Kube, cluster: LocalCluster, namespace: str, buildrun: str,
                 say: Callable[[str], None]) -> None:
        self.kube = kube
        self.cluster = cluster
        self.namespace = namespace
        self.buildrun = buildrun
        self.say = say

    async def run(self) -> None:
        pod = await self._pod()
        name = pod["metadata"]["name"]
        steps = [c["name"] for c in pod["spec"]["containers"] if c["name"].startswith("step-")]
        for step in steps:
            await self._started(name, step)
            await self._follow(name, step)

    async def _pod(self) -> JSON:
        selector = f"{LABEL_BUILDRUN}={self.buildrun}"
        while True:
            with contextlib.suppress(ApiError, aiohttp.ClientError):
                pods: list[JSON] = (await self.kube.request(
                    "GET", PODS.path(self.namespace),
                    query={"labelSelector": selector}))["items"]
                if pods:
                    return pods[0]
            await asyncio.sleep(0.5)

    async def _started(self, pod: str, container: str) -> None:
        while True:
            with contextlib.suppress(ApiError, aiohttp.ClientError):
                got = await self.kube.get(PODS, self.namespace, pod)
                for status in (got.get("status") or {}).get("containerStatuses") or []:
                    if status["name"] == container and (
                            "running" in status["state"] or "terminated" in status["state"]):
                        return
            await asyncio.sleep(0.5)

    async def _follow(self, pod: str, container: str) -> None:
        c = self.cluster
        url = (f"{c.url}/api/v1/namespaces/{self.namespace}/pods/{pod}/log"
               f"?container={container}&follow=true")
        step = container.removeprefix("step-")
        async with aiohttp.ClientSession() as session, session.get(
            url, headers={"Authorization": f"Bearer {c.admin.token}"}, ssl=c.ssl_context(),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        ) as resp:
            if resp.status != 200:
                self.say(f"{BUILD} {step}: no log ({resp.status} {(await resp.text())[:200]})")
                return
            async for raw in resp.content:
                line = raw.decode(errors="replace").rstrip()
                if line:
                    self.say(f"{BUILD} {step}: {line}")

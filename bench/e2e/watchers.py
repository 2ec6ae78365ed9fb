"""The watches our controller holds open, and nothing else of it: `--mode watched`'s
second process (bench.e2e.common.Watchers starts it).

    python -m bench.e2e.watchers --kubeconfig K --health-probe-bind-address 127.0.0.1:P

The informers are the controller's own: `controller.app.wire` asks the process's
InformerFactory for every kind the BuildRun, Build and build-limit controllers read,
with the same label selectors (the BuildRuns' TaskRuns and pods only), metadata-only
watches (Secrets) and transforms, so this set cannot drift from what the controller
watches. Each informer lists and watches and keeps its cache, as in the controller; no
worker runs and no handler enqueues anywhere (the controllers are made, never started).
What the API server spends with this process connected is the fan-out every controller
with these watches costs it: the limit `--mode watched` measures. /readyz answers 200
once every informer has listed (as the controller's does), so the benchmark times its
writes from the same point.

With `--writers W` (throughput's `--writes on-event`) it is also a controller with no
logic: each BuildRun its informer delivers new (ADDED, no taskRunName) is queued, and W
writers send the controller's start writes for it (bodies.start_writes: the label
PATCH, the TaskRun, the started status, as the controller's field manager), the Build and
BuildStrategy read from the informers' caches. No state table, no second look, no
retries: what a controller's start costs the machine with none of ours' logic.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from bench.e2e.bodies import Client, start_writes
from controller.app import wire
from controller.runtime.events import EventRecorder
from controller.runtime.informers import EventType, InformerFactory
from controller.runtime.kube import JSON, Kube, load_api_client
from controller.runtime.server import Endpoints
from controller.settings import Settings
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
)

log = logging.getLogger("bench.e2e.watchers")


def start_writers(kube: Kube, informers: InformerFactory, writers: int) -> list[asyncio.Task[None]]:
    """`writers` tasks sending each new BuildRun's start writes (bodies.start_writes, as
    the controller's field manager: Client)."""
    client = Client(kube, "raw")
    todo: asyncio.Queue[JSON] = asyncio.Queue()

    def on_buildrun(kind: EventType, obj: JSON, old: JSON | None, initial: bool) -> None:
        if kind == "ADDED" and not (obj.get("status") or {}).get("taskRunName"):
            todo.put_nowait(obj)

    informers.get(BUILDRUNS).add_handler(on_buildrun)

    async def writer() -> None:
        while True:
            buildrun = await todo.get()
            namespace = buildrun["metadata"]["namespace"]
            build = informers.get(BUILDS).store.get(
                f"{namespace}/{buildrun['spec']['build']['name']}")
            assert build is not None, "the bench creates its Build before its BuildRuns"
            ref = build["spec"]["strategy"]
            strategies = (CLUSTERBUILDSTRATEGIES if ref.get("kind") == "ClusterBuildStrategy"
                          else BUILDSTRATEGIES)
            strategy = informers.get(strategies).store.get(
                ref["name"] if strategies is CLUSTERBUILDSTRATEGIES
                else f"{namespace}/{ref['name']}")
            assert strategy is not None, "the bench creates its strategy before its BuildRuns"
            try:
                await start_writes(client, buildrun, build, strategy)
            except Exception:
                log.exception("start writes failed", extra={"buildrun": buildrun["metadata"]})

    return [asyncio.create_task(writer()) for _ in range(writers)]


async def main_async(kubeconfig: str, probe_address: str, writers: int) -> None:
    kube = Kube(await load_api_client(kubeconfig))
    informers = InformerFactory(kube, None, None)
    wire(kube, Settings(), EventRecorder(kube, "bench-watchers", "bench"), informers)
    writing = start_writers(kube, informers, writers)
    endpoints = Endpoints(lambda: all(i.has_synced() for i in informers.all()))
    await endpoints.start("0", probe_address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(i.run()) for i in informers.all()] + writing
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await endpoints.stop()
    await kube.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--health-probe-bind-address", required=True)
    p.add_argument("--writers", type=int, default=0,
                   help="send the controller's start writes for each new BuildRun, this "
                   "many at a time (0: only watch)")
    args = p.parse_args()
    asyncio.run(main_async(args.kubeconfig, args.health_probe_bind_address, args.writers))


if __name__ == "__main__":
    main()

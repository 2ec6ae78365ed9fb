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
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from controller.app import wire
from controller.runtime.events import EventRecorder
from controller.runtime.informers import InformerFactory
from controller.runtime.kube import Kube, load_api_client
from controller.runtime.server import Endpoints
from controller.settings import Settings


async def main_async(kubeconfig: str, probe_address: str) -> None:
    kube = Kube(await load_api_client(kubeconfig))
    informers = InformerFactory(kube, None, None)
    wire(kube, Settings(), EventRecorder(kube, "bench-watchers", "bench"), informers)
    endpoints = Endpoints(lambda: all(i.has_synced() for i in informers.all()))
    await endpoints.start("0", probe_address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(i.run()) for i in informers.all()]
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
    args = p.parse_args()
    asyncio.run(main_async(args.kubeconfig, args.health_probe_bind_address))


if __name__ == "__main__":
    main()

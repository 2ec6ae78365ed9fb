from __future__ import annotations

import pytest

from controller.devtools.tekton import TektonSimulator
from controller.kube import Kube
from tests.harness import World, condition, running_controller, controller_settings

pytestmark = pytest.mark.cluster


async def test_happy_path(cluster, kube: Kube, namespace: str) -> None:
    w = World(kube, namespace)
    await w.strategy()
    await w.build()
    async with running_controller(controller_settings(cluster, namespace)):
        await w.buildrun("br1")
        tr = await w.taskrun_of("br1")
        tekton = TektonSimulator(kube)
        await tekton.start(namespace, tr)
        await tekton.finish(namespace, tr, "success")
        br = await w.finished("br1")
    assert condition(br)["status"] == "True", br["status"]

"""The objects every run of BuildRuns starts from: a namespace, one BuildStrategy and one
Build that uses it, and the BuildRuns that name that Build.

`make dev` (devtools.dev.samples), the fault soak, the end-to-end benchmarks, the dashboard
render and the cluster tests (tests.harness.World) all make them here, so the shape of
these objects is written once. The defaults are the world most of them share: strategy
"kaniko" with a `dockerfile` parameter, Build "app" from https://example.com/app.git to
registry.example.com/app:latest. Callers that tell another story (`make dev`'s Build
"hello") pass their own values.

Invariants:
- every function returns a new dict, never one shared with another call, so a caller may
  change what it gets;
- `build()` and `build_spec()` refer to a namespaced BuildStrategy (kind BuildStrategy) by
  name, so `build(strategy=s["metadata"]["name"])` resolves against `strategy()`'s `s`;
- with the defaults, `buildrun(name)` names the Build `create_strategy_and_build` makes, and
  every parameter its strategy declares has a default: the BuildRun needs nothing else to
  run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.runtime.kube import JSON, Kube, Resource
from controller.shipwright.resources import BUILDS, BUILDSTRATEGIES

API = "shipwright.io/v1beta1"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)

STRATEGY = "kaniko"
BUILD = "app"
SOURCE_URL = "https://example.com/app.git"
IMAGE = "registry.example.com/app:latest"
KANIKO = "gcr.io/kaniko-project/executor"
# A step names its command: without one Tekton asks the image's registry for the
# entrypoint, and with no network the TaskRun fails PodCreationFailed.
KANIKO_COMMAND: tuple[str, ...] = ("/kaniko/executor",)
DOCKERFILE_ARGS: tuple[str, ...] = ("--dockerfile=$(params.dockerfile)",)


def dockerfile_parameter() -> JSON:
    """The one parameter the default strategy declares, with its default."""
    return {"name": "dockerfile", "description": "The Dockerfile to build", "type": "string",
            "default": "Dockerfile"}


def strategy(name: str = STRATEGY, *, parameters: list[JSON] | None = None,
             args: Sequence[str] = DOCKERFILE_ARGS) -> JSON:
    """A BuildStrategy whose one step "build" runs kaniko's executor with `args`.

    `parameters` None means the `dockerfile` parameter alone; [] declares none.
    """
    return {
        "apiVersion": API, "kind": "BuildStrategy", "metadata": {"name": name},
        "spec": {
            "parameters": [dockerfile_parameter()] if parameters is None else parameters,
            "steps": [{"name": "build", "image": KANIKO, "command": list(KANIKO_COMMAND),
                       "args": list(args)}],
        },
    }


def build_spec(strategy: str = STRATEGY, *, source_url: str = SOURCE_URL,
               image: str = IMAGE) -> JSON:
    """A Build's spec: the namespaced strategy `strategy`, a git source, an output image.

    Also what a started BuildRun of the default Build shows as `status.buildSpec`.
    """
    return {
        "strategy": {"name": strategy, "kind": "BuildStrategy"},
        "source": {"type": "Git", "git": {"url": source_url}},
        "output": {"image": image},
    }


def build(name: str = BUILD, /, *, strategy: str = STRATEGY, source_url: str = SOURCE_URL,
          image: str = IMAGE, **spec: Any) -> JSON:
    """A Build `name` with `build_spec()`'s fields; `spec` adds fields or replaces them."""
    body = build_spec(strategy, source_url=source_url, image=image)
    body.update(spec)
    return {"apiVersion": API, "kind": "Build", "metadata": {"name": name}, "spec": body}


def buildrun(name: str, build: str | None = BUILD, /, **spec: Any) -> JSON:
    """A BuildRun `name` of the Build `build` (no `spec.build` when None: then `spec` says
    everything); `spec` adds fields or replaces them, `build` among them."""
    body: JSON = {"build": {"name": build}} if build is not None else {}
    body.update(spec)
    return {"apiVersion": API, "kind": "BuildRun", "metadata": {"name": name}, "spec": body}


async def create_namespace(kube: Kube, name: str) -> JSON:
    """Creates namespace `name` (an ApiError 409 if it exists)."""
    return await kube.create(NAMESPACES, None, {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


async def create_strategy_and_build(kube: Kube, namespace: str, *,
                                    strategy_body: JSON | None = None,
                                    build_body: JSON | None = None) -> tuple[JSON, JSON]:
    """Creates a BuildStrategy, then a Build, in `namespace` (which must exist): the
    defaults `strategy()` and `build()` unless bodies are given. Returns both as created.
    """
    created_strategy = await kube.create(BUILDSTRATEGIES, namespace,
                                         strategy_body if strategy_body is not None
                                         else strategy())
    created_build = await kube.create(BUILDS, namespace,
                                      build_body if build_body is not None else build())
    return created_strategy, created_build


async def setup_namespace(kube: Kube, namespace: str, *, strategy_body: JSON | None = None,
                          build_body: JSON | None = None) -> tuple[JSON, JSON]:
    """Creates namespace `namespace`, then `create_strategy_and_build` in it."""
    await create_namespace(kube, namespace)
    return await create_strategy_and_build(kube, namespace, strategy_body=strategy_body,
                                           build_body=build_body)

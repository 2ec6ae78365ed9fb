"""The story `make dev` plays: four sample BuildRuns in namespace "demo", what each must
end as, and the order and timing that make each one's story happen.

- `flaky-webhook` takes the first WEBHOOK_FAILURES TaskRun creations, which the flaky
  webhook times out (a system error, retried), then succeeds;
- `hello` runs and succeeds;
- `missing-build` names a Build that does not exist (a user error, never retried);
- `cancel-me` runs until cancelled, and is cancelled once Running;
- `real-build` (REAL_BUILD, where the machine holds a real node) is Shipwright's buildah
  sample built for real: a pod on the stack's real node clones the stack's Git server,
  builds with buildah and pushes to the stack's registry.

Real Tekton runs the TaskRuns and kwok their pods; `fate_for` tells kwok (through
devtools.fakes.fates) how long each sample's pod runs and how it ends.

Invariants: SAMPLES' names are unique and each `expect` is the reason its Succeeded
condition must end with; `play_samples` creates `flaky-webhook` alone and waits for its
TaskRun before creating the others (the webhook's script counts calls, not BuildRuns),
and cancels `cancel-me` only after it is Running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from controller.runtime.kube import JSON, ApiError, Kube
from controller.shipwright.conditions import succeeded_condition
from controller.shipwright.resources import BUILDRUNS, BUILDS, CLUSTERBUILDSTRATEGIES
from devtools.cluster import fixtures
from devtools.cluster.polling import wait_until
from devtools.dev.screen import DEV
from devtools.fakes.fates import fate_annotations, results
from devtools.fakes.webhook import Verdict
from devtools.node import realbuilds
from devtools.node.realnode import RealNode

NAMESPACE = "demo"
CANCELED = "BuildRunCanceled"
WEBHOOK = "[flaky-webhook]"
# The webhook times out this many TaskRun creations, then allows every one.
WEBHOOK_FAILURES = 2
# How long a sample's pod runs before it succeeds.
DEFAULT_RUN_SECONDS = 4.0
# The digest the sample pods report (kwok writes it as the step's result).
DIGEST = "sha256:" + "d3" * 32


@dataclass(frozen=True)
class Sample:
    name: str
    build: str
    expect: str  # the reason its Succeeded condition must end with
    story: str
    run_seconds: float | None = DEFAULT_RUN_SECONDS  # its pod's run time; None: until stopped


SAMPLES = (
    Sample("flaky-webhook", "hello", "Succeeded",
           f"TaskRun creation times out {WEBHOOK_FAILURES}x at a webhook; retried with backoff"),
    Sample("hello", "hello", "Succeeded", "runs and succeeds"),
    Sample("missing-build", "does-not-exist", "BuildNotFound",
           "user error: its Build does not exist, fails at once, never retried"),
    Sample("cancel-me", "hello", CANCELED,
           "cancelled (spec.state=BuildRunCanceled) while its TaskRun runs", None),
)
SAMPLE_BY_NAME = {s.name: s for s in SAMPLES}
# Where this machine holds a real node (devtools.node.realnode): Shipwright's buildah
# sample, really built from the stack's Git server and pushed to its registry; its log is
# told line by line (devtools.dev.buildlog).
REAL_BUILD = Sample("real-build", "real-hello", "Succeeded",
                    "Shipwright's buildah sample, built for real on the real node: "
                    "git clone, buildah bud, push", None)

# The strategy pushes where the Build says (shp-output-image), and the Build "hello" is
# Shipwright's own sample: what a user would write.
STRATEGY_ARGS = (*fixtures.DOCKERFILE_ARGS, "--destination=$(params.shp-output-image)")
HELLO_SOURCE = "https://github.com/shipwright-io/sample-go"
HELLO_IMAGE = "registry.example.com/demo/hello:latest"


async def create_samples_base(kube: Kube) -> None:
    """Namespace "demo", the BuildStrategy "kaniko" and the Build "hello" that the
    samples (but `missing-build`) run."""
    await fixtures.setup_namespace(
        kube, NAMESPACE,
        strategy_body=fixtures.strategy(args=STRATEGY_ARGS),
        build_body=fixtures.build("hello", source_url=HELLO_SOURCE, image=HELLO_IMAGE),
    )


async def create_buildrun(kube: Kube, sample: Sample) -> None:
    await kube.create(BUILDRUNS, NAMESPACE, fixtures.buildrun(sample.name, sample.build))


async def create_real_build(kube: Kube, node: RealNode) -> None:
    """REAL_BUILD's Build: Shipwright's buildah sample with managed push and its strategy,
    as written but for the Git URL, the registry and the real node's placement."""
    (build,) = realbuilds.shipwright_sample("build", realbuilds.BUILDAH_MANAGED_PUSH)
    with contextlib.suppress(ApiError):  # a cluster-wide strategy: it may be there
        await kube.create(CLUSTERBUILDSTRATEGIES, None, realbuilds.sample_strategy(build))
    await kube.create(BUILDS, NAMESPACE, realbuilds.on_real_node(
        node, build, NAMESPACE, name=REAL_BUILD.build))


async def play_samples(kube: Kube, say: Callable[[str], None], real: bool = False) -> None:
    """Creates the sample BuildRuns in an order that makes each story happen; with `real`,
    REAL_BUILD too (create_real_build made its Build), right after `flaky-webhook` has
    taken the webhook's failing calls."""
    flaky, hello, missing, cancel = SAMPLES

    async def get(name: str) -> JSON:
        return await kube.get(BUILDRUNS, NAMESPACE, name)

    async def has_taskrun(name: str) -> bool:
        return bool(((await get(name)).get("status") or {}).get("taskRunName"))

    # The webhook's script counts calls, not BuildRuns: let this one take the
    # failing calls before any other BuildRun creates a TaskRun.
    say(f"{DEV} creating BuildRun {flaky.name}: {flaky.story}")
    await create_buildrun(kube, flaky)
    await wait_until(lambda: has_taskrun(flaky.name), 60)
    for sample in ((REAL_BUILD,) if real else ()) + (hello, missing, cancel):
        say(f"{DEV} creating BuildRun {sample.name}: {sample.story}")
        await create_buildrun(kube, sample)

    async def running(name: str) -> bool:
        cond = succeeded_condition((await get(name)).get("status")) or {}
        return cond.get("reason") == "Running"

    await wait_until(lambda: running(cancel.name), 60)
    say(f"{DEV} cancelling BuildRun {cancel.name}: merge patch spec.state={CANCELED}")
    await kube.patch(BUILDRUNS, NAMESPACE, cancel.name, {"spec": {"state": CANCELED}})


def finished(buildruns: list[JSON]) -> dict[str, str | None]:
    """Name -> the reason of the Succeeded condition, of each BuildRun that has a
    completionTime (None where it has no such condition)."""
    return {b["metadata"]["name"]: (succeeded_condition(b.get("status")) or {}).get("reason")
            for b in buildruns if (b.get("status") or {}).get("completionTime")}


def unexpected(done: dict[str, str | None],
               samples: tuple[Sample, ...] = SAMPLES) -> list[str]:
    """One line per sample that did not end as it should (`done` as `finished` gives)."""
    return [f"{s.name}: expected {s.expect}, got {done.get(s.name)}"
            for s in samples if done.get(s.name) != s.expect]


def fate_for(namespace: str, buildrun: str) -> dict[str, str] | None:
    """What kwok does with a sample's pod (devtools.fakes.fates): runs `run_seconds`, then
    succeeds with the digest as its result, or holds until Tekton stops it."""
    sample = SAMPLE_BY_NAME.get(buildrun)
    if namespace != NAMESPACE or sample is None:
        return None
    if sample.run_seconds is None:
        return fate_annotations(fate="hold")
    return fate_annotations(fate="succeed", run_duration=f"{sample.run_seconds:g}s",
                            results=results(**{"shp-image-digest": DIGEST}))


def webhook_script(say: Callable[[str], None]) -> Callable[[int], Verdict]:
    """The flaky webhook's script: the first WEBHOOK_FAILURES calls time out, every later
    one is allowed; each call is told with `say`, labelled WEBHOOK."""

    def script(call: int) -> Verdict:
        verdict: Verdict = "timeout" if call <= WEBHOOK_FAILURES else "allow"
        say(f"{WEBHOOK} TaskRun create #{call}: "
            + ("timing out (the API server gives up after 1s)"
               if verdict == "timeout" else "allowed"))
        return verdict

    return script

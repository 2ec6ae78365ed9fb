"""How a test, `make dev` or the soak chooses what kwok does with a BuildRun's pod.

kwok moves pods by the stages in hack/kwok/stages, and a pod's fate is chosen by its
`buildrun-controller.test/...` annotations (hack/kwok/stages/README.md). The generated
TaskRun carries no annotations of ours, so `FateWebhook`, a mutating admission webhook
for pods served from this process, adds them when Tekton creates the pod: it reads the
BuildRun name label Tekton copies from the TaskRun to its pod and asks `decide`.

Invariants: `decide(namespace, buildrun)` is asked once per pod creation; None (or {})
adds nothing, so the pod takes the default fate (succeed at once). Only pods with the
BuildRun label are sent here (objectSelector), so no other pod depends on this process.
The webhook fails closed (failurePolicy Fail): a pod must never run with the wrong
fate because this server was slow, so a caller whose loop may stall raises
`timeout_seconds` (at most 30, the API server's limit).

`FateWebhook(..., from_steps=True)`: where `decide` gives nothing, the pod gets the fate
its own step commands determine (`step_fate`), for a workload that picks its pods'
fates the way a real cluster would, by what the containers run (Shipwright's
integration suite: a strategy step `false` fails, `sleep 30s` runs 30 s). It is a
stand-in for running the commands, limited to the few whose whole effect is an exit
code and a duration; any other step (kaniko, buildah, crane, Shipwright's git and
bundle steps) runs UNKNOWN_STEP_SECONDS and exits 0, a stand-in for a tool's work whose
length is the one thing kept. It knows nothing of who created the pod.
"""

from __future__ import annotations

import base64
import contextlib
import json
import posixpath
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp
from aiohttp import web

from controller.runtime.kube import JSON
from controller.shipwright.labels import LABEL_BUILDRUN
from devtools.cluster.localcluster import LocalCluster, free_port
from devtools.fakes.webhook import registration, serve_https

PREFIX = "buildrun-controller.test/"

Decide = Callable[[str, str], Mapping[str, str] | None]

# Tekton's entrypoint binary, which every step container of a TaskRun's pod runs with
# the step's own command after "-entrypoint" and its arguments after "--"
# (tektoncd/pipeline pkg/pod/entrypoint.go, orderContainers).
TEKTON_ENTRYPOINT = "/tekton/bin/entrypoint"
# An operand of sleep as busybox (alpine) and GNU coreutils read it: a non-negative
# decimal number of seconds, optionally suffixed s, m, h or d; several are added up.
_SLEEP_OPERAND = re.compile(r"^(\d+\.?\d*|\.\d+)([smhd]?)$")
_SLEEP_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# How long a step whose command is not emulated here runs before it exits 0 (step_fate):
# a build tool's work, whose length is all a test can see of it without a container.
# Shipwright's integration suite (hack/kwok/stages/README "The 5 s a tool's step runs"):
# every build it times out (5 s) runs a Git source step and a kaniko or buildah one, 10 s
# here; its fastest such build, a Git step and `true`, outlasts its 3 s poll by 2 s plus
# the pod's start. Longer would slow every spec that waits for a build to end: at 10 s the
# same 111 specs took 1905 s in all, 1433 s with none (two whole runs at load 10-16).
UNKNOWN_STEP_SECONDS = 5.0
# $(NAME) in a container's command and args, which the kubelet expands from its env.
_ENV_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expand(arg: str, env: Mapping[str, str | None]) -> str | None:
    """`arg` with $(NAME) expanded from the container's `env` as the kubelet does; None
    where NAME's value is not in the pod (valueFrom: None in `env`), so unknown here.
    An undefined NAME stays as written, as the kubelet leaves it."""
    names = [m.group(1) for m in _ENV_REFERENCE.finditer(arg)]
    if any(name in env and env[name] is None for name in names):
        return None
    return _ENV_REFERENCE.sub(
        lambda m: value if (value := env.get(m.group(1))) is not None else m.group(0), arg)


def _step_effect(container: JSON) -> tuple[float, int] | None:
    """(seconds it runs, exit code) of one Tekton step container, for the commands
    whose whole effect is that: `true` (0 s, 0), `false` (0 s, 1), `sleep OPERAND...`
    (their sum, 0; a missing or malformed operand: 0 s, 1, as sleep says "invalid
    time interval"). None for anything else (not run here, so not known)."""
    args = [str(a) for a in container.get("args") or []]
    if list(container.get("command") or []) != [TEKTON_ENTRYPOINT] or "--" not in args:
        return None
    split = args.index("--")
    flags, operands = args[:split], args[split + 1:]
    if "-entrypoint" not in flags[:-1]:
        return None
    env = {str(v["name"]): (str(v["value"]) if "value" in v else None)
           for v in container.get("env") or []}
    expanded = [_expand(a, env) for a in (flags[flags.index("-entrypoint") + 1], *operands)]
    if any(text is None for text in expanded):
        return None
    program = posixpath.basename(str(expanded[0]))
    operands = [str(text) for text in expanded[1:]]
    if program == "true":
        return 0.0, 0
    if program == "false":
        return 0.0, 1
    if program != "sleep":
        return None
    matches = [_SLEEP_OPERAND.match(o) for o in operands]
    if not operands or not all(matches):
        return 0.0, 1
    return sum(float(m.group(1)) * _SLEEP_UNIT[m.group(2)] for m in matches if m), 0


def step_fate(pod: JSON) -> dict[str, str]:
    """The fate annotations a Tekton pod's step commands determine, as if its step
    containers ran: steps run in order, each for as long as its command does; the first
    that exits non-zero (unless its onError is continue) ends the pod Failed with that
    exit code, and the steps after it do not run. A step whose command is not one
    `_step_effect` knows (a build tool, a shell, a command read from a Secret) runs
    UNKNOWN_STEP_SECONDS and exits 0. {} when nothing differs from the pod's default fate
    (exit 0 at once). kwok reports the LAST step as the failing one
    (hack/kwok/stages/pod-fail.yaml), so a failure is exact for a one-step strategy."""
    seconds, exit_code = 0.0, 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not str(container.get("name", "")).startswith("step-"):
            continue  # sidecars
        effect = _step_effect(container) or (UNKNOWN_STEP_SECONDS, 0)
        seconds += effect[0]
        args = [str(a) for a in container.get("args") or []]
        on_error = args[args.index("-on_error") + 1] if "-on_error" in args[:-1] else ""
        if effect[1] != 0 and on_error != "continue":
            exit_code = effect[1]
            break
    fate: dict[str, str] = {}
    if exit_code:
        fate |= {"fate": "fail", "exit_code": str(exit_code)}
    if seconds:
        fate["run_duration"] = f"{round(seconds * 1000)}ms"
    return fate_annotations(**fate) if fate else {}


def fate_annotations(**fate: str) -> dict[str, str]:
    """kwok's fate annotations from keyword arguments: `fate="fail", exit_code="3"` ->
    {"buildrun-controller.test/fate": "fail", "buildrun-controller.test/exit-code": "3"}."""
    return {PREFIX + k.replace("_", "-"): v for k, v in fate.items()}


def results(**values: str) -> str:
    """The `results` annotation's value: a JSON object of the step's results."""
    return json.dumps(values)


class FateWebhook:
    """Adds `decide(namespace, buildrun)`'s annotations to each BuildRun's pod at creation.

    `fates` is a ready-made `decide` table for tests: `fates[(namespace, buildrun)]`.
    With `from_steps`, a pod `decide` gives nothing gets `step_fate(pod)`. `patch(pod)`
    adds JSON patch operations of its own to each pod (e.g. realnode.place_pod).
    Use as `async with FateWebhook(cluster) as hook:`; `calls` counts pods seen. Stopped,
    it removes its configuration (failing closed, it would refuse every later pod).
    """

    def __init__(self, cluster: LocalCluster, decide: Decide | None = None, *,
                 timeout_seconds: int = 5, name: str = "fates.buildrun-controller.test",
                 from_steps: bool = False,
                 patch: Callable[[JSON], list[JSON]] | None = None) -> None:
        self.cluster = cluster
        self.from_steps = from_steps
        self.patch = patch
        self.fates: dict[tuple[str, str], dict[str, str]] = {}
        self.decide: Decide = decide or (lambda ns, br: self.fates.get((ns, br)))
        self.timeout_seconds = timeout_seconds
        self.name = name
        self.port = free_port()
        self.calls = 0
        self._runner: web.AppRunner | None = None

    def set(self, namespace: str, buildrun: str, **fate: str) -> None:
        """The pod of `buildrun` gets `fate_annotations(**fate)`."""
        self.fates[(namespace, buildrun)] = fate_annotations(**fate)

    async def _mutate(self, request: web.Request) -> web.Response:
        review = await request.json()
        req = review["request"]
        meta = req["object"].get("metadata") or {}
        namespace = req.get("namespace") or meta.get("namespace") or ""
        self.calls += 1
        fate = dict(self.decide(namespace, (meta.get("labels") or {}).get(LABEL_BUILDRUN, ""))
                    or {})
        if not fate and self.from_steps:
            fate = step_fate(req["object"])
        response: JSON = {"uid": req["uid"], "allowed": True}
        ops: list[JSON] = []
        if fate and meta.get("annotations"):
            ops = [{"op": "add", "path": "/metadata/annotations/" + k.replace("/", "~1"),
                    "value": v} for k, v in fate.items()]
        elif fate:
            ops = [{"op": "add", "path": "/metadata/annotations", "value": fate}]
        if self.patch is not None:
            ops += self.patch(req["object"])
        if ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        return web.json_response({"apiVersion": "admission.k8s.io/v1",
                                  "kind": "AdmissionReview", "response": response})

    async def __aenter__(self) -> FateWebhook:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._runner = await serve_https(self.cluster.ca, self.port, "/mutate", self._mutate,
                                         Path(tempfile.mkdtemp(prefix="fates-")))
        await self.cluster.apply(registration(
            "MutatingWebhookConfiguration", self.name, self.cluster.ca, self.port, "/mutate",
            rules=[{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["pods"]}],
            timeout_seconds=self.timeout_seconds,
            objectSelector={"matchExpressions": [{"key": LABEL_BUILDRUN, "operator": "Exists"}]}))

    async def stop(self) -> None:
        if self._runner is not None:
            # An API server already stopped (or restarted by a chaos run) keeps nothing
            # that could refuse a pod later, so failing to reach it is not an error here.
            with contextlib.suppress(RuntimeError, aiohttp.ClientError, OSError):
                await self.cluster.request("DELETE", "/apis/admissionregistration.k8s.io/v1/"
                                           f"mutatingwebhookconfigurations/{self.name}")
            await self._runner.cleanup()
            self._runner = None

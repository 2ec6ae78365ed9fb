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
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from aiohttp import web

from controller.runtime.kube import JSON
from controller.shipwright.labels import LABEL_BUILDRUN
from devtools.cluster.localcluster import LocalCluster, free_port
from devtools.cluster.webhook import serve_https

PREFIX = "buildrun-controller.test/"

Decide = Callable[[str, str], Mapping[str, str] | None]


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
    Use as `async with FateWebhook(cluster) as hook:`; `calls` counts pods seen.
    """

    def __init__(self, cluster: LocalCluster, decide: Decide | None = None, *,
                 timeout_seconds: int = 5, name: str = "fates.buildrun-controller.test") -> None:
        self.cluster = cluster
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
        response: JSON = {"uid": req["uid"], "allowed": True}
        if fate:
            ops: list[JSON]
            if meta.get("annotations"):
                ops = [{"op": "add", "path": "/metadata/annotations/" + k.replace("/", "~1"),
                        "value": v} for k, v in fate.items()]
            else:
                ops = [{"op": "add", "path": "/metadata/annotations", "value": fate}]
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
        await self.cluster.apply({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [{
                "name": self.name,
                "clientConfig": {"url": f"https://127.0.0.1:{self.port}/mutate",
                                 "caBundle": base64.b64encode(self.cluster.ca.cert_pem).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"]}],
                "objectSelector": {"matchExpressions": [
                    {"key": LABEL_BUILDRUN, "operator": "Exists"}]},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": self.timeout_seconds,
            }],
        })

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

"""A real validating admission webhook for TaskRuns, with scripted misbehaviour.

Registered on the local API server as a ValidatingWebhookConfiguration, it
makes TaskRun creation fail the way a flaky Tekton webhook does: by timing
out (the API server gives up after `timeoutSeconds`) or by answering 500.
Used by tests, the fault soak and `make dev`; never by the controller.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from devtools.cluster.certs import KeyPair, issue_serving_cert
from devtools.cluster.localcluster import LocalCluster, free_port

# "hold": answered (allowed) only after `hold_seconds`, within the API server's timeout:
# the create lands late, as one whose client stalled (a replica that lost its lease).
Verdict = Literal["allow", "timeout", "error", "hold"]


async def serve_https(ca: KeyPair, port: int, path: str,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                      workdir: Path) -> web.AppRunner:
    """Serves `handler` at POST https://127.0.0.1:PORT/PATH with a certificate the local
    cluster's CA signed, as an admission webhook must be; `cleanup()` the runner to stop."""
    cert, key = issue_serving_cert(ca, ["127.0.0.1"]).write(workdir, "webhook")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    app = web.Application()
    app.add_routes([web.post(path, handler)])
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    return runner


def registration(kind: str, name: str, ca: KeyPair, port: int, path: str, *,
                 rules: list[dict[str, Any]], timeout_seconds: int,
                 **selectors: Any) -> dict[str, Any]:
    """A `kind` (Validating- or MutatingWebhookConfiguration) of one webhook `name`, called
    at https://127.0.0.1:PORT/PATH (as serve_https serves it) for `rules`, refusing the
    request when it cannot be reached (failurePolicy Fail); `selectors` are the webhook's
    namespaceSelector or objectSelector."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [{
            "name": name,
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca.cert_pem).decode(),
            },
            "rules": rules,
            **selectors,
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": timeout_seconds,
        }],
    }


class FlakyWebhook:
    """`script(n)` says what the n-th call (from 1) gets: allow, timeout, error or hold.

    Invariants: `calls` counts every scripted call, and `verdicts` holds what each got,
    in order; the webhook's own readiness probes (dry runs) count in `probes` only and
    are always allowed. A subclass changes how a call is decided (and what it records)
    by overriding `verdict_for`, never the request handling around it.
    """

    def __init__(self, cluster: LocalCluster, namespace: str | None,
                 script: Callable[[int], Verdict], *, timeout_seconds: int = 1,
                 hold_seconds: float = 0.0) -> None:
        assert hold_seconds < timeout_seconds or not hold_seconds, "a hold must be answered"
        self.cluster = cluster
        self.namespace = namespace
        self.script = script
        self.timeout_seconds = timeout_seconds
        self.hold_seconds = hold_seconds
        self.calls = 0
        self.probes = 0
        self.verdicts: list[Verdict] = []
        self.port = free_port()
        self.name = f"flaky-{self.port}.buildrun-controller.test"
        self._runner: web.AppRunner | None = None

    async def _validate(self, request: web.Request) -> web.Response:
        review = await request.json()
        if review["request"].get("dryRun"):
            # Our own readiness probe (see __aenter__): allowed, and not a scripted call.
            self.probes += 1
            return self._allow(review)
        self.calls += 1
        verdict = self.verdict_for(review["request"])
        self.verdicts.append(verdict)
        if verdict == "timeout":
            # The API server gives up after timeout_seconds and fails the create.
            await asyncio.sleep(self.timeout_seconds + 1.0)
        if verdict == "hold":
            await asyncio.sleep(self.hold_seconds)
        if verdict == "error":
            return web.Response(status=500, text="webhook backend unavailable")
        return self._allow(review)

    def verdict_for(self, request: dict[str, Any]) -> Verdict:
        """What the call `self.calls` gets; `request` is the AdmissionReview's request
        (the TaskRun is its "object"). Called once per scripted call."""
        return self.script(self.calls)

    @staticmethod
    def _allow(review: dict[str, Any]) -> web.Response:
        return web.json_response({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True},
        })

    async def __aenter__(self) -> FlakyWebhook:
        self._runner = await serve_https(self.cluster.ca, self.port, "/validate",
                                         self._validate,
                                         Path(tempfile.mkdtemp(prefix="webhook-")))
        selector = (
            {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}
            if self.namespace else {}
        )
        await self.cluster.apply(registration(
            "ValidatingWebhookConfiguration", self.name, self.cluster.ca, self.port,
            "/validate", rules=[{"apiGroups": ["tekton.dev"], "apiVersions": ["v1"],
                                 "operations": ["CREATE"], "resources": ["taskruns"]}],
            timeout_seconds=self.timeout_seconds, namespaceSelector=selector))
        await self._wait_active()
        return self

    async def _wait_active(self, timeout: float = 30.0) -> None:
        """The API server picks up webhook configurations asynchronously: dry-run
        TaskRun creates until one reaches us."""
        namespace = self.namespace or "default"
        # A TaskRun Tekton's own validating webhook admits too, where it runs.
        probe = {"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                 "metadata": {"name": "webhook-probe"},
                 "spec": {"taskSpec": {"steps": [{"name": "s", "image": "busybox",
                                                  "command": ["true"]}]}}}
        deadline = asyncio.get_running_loop().time() + timeout
        while self.probes == 0:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"webhook {self.name} never called")
            await self.cluster.request(
                "POST", f"/apis/tekton.dev/v1/namespaces/{namespace}/taskruns?dryRun=All", probe
            )
            await asyncio.sleep(0.1)

    async def __aexit__(self, *exc: object) -> None:
        await self.cluster.request(
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{self.name}",
        )
        if self._runner is not None:
            await self._runner.cleanup()

"""How long a namespace takes to be made and to go on the real-Tekton stack, by phase.

    .venv/bin/python -m bench.e2e.namespaces --repeat 3 [--kcm-log]

Shipwright's integration suite (tests/cluster/test_shipwright_it.py) makes a namespace
for each spec and deletes it after, and waits for both (test/utils/v1beta1/namespaces.go
at v0.20.13): after the create it polls for the `default` ServiceAccount, at once and
then every 3 s; after the delete it polls for the namespace to be gone, at once and
then every 3 s. This script does the same on a fresh devtools.cluster.stack.TektonStack
(with FateWebhook for kwok's fates), for three contents of the namespace:

  empty     the namespace alone
  finished  what a passing spec leaves: a Secret, a ServiceAccount, a Build and a
            BuildRun (our CRDs; no controller runs, so nothing reconciles them) and a
            TaskRun whose pod kwok ran to Succeeded (the default fate)
  running   the same with the pod held Running (fate `hold`), as a spec that ends while
            its build runs leaves it

and prints, per content, median and max over --repeat rounds of:

  sa        namespace created -> its `default` ServiceAccount exists (0 when the GET
            right after the create finds it; else polled every 20 ms)
  gone      DELETE returned -> GET answers 404 (polled every 20 ms)
  first     DELETE returned -> the namespace controller's first write to the namespace
            (its NamespaceDeletion* conditions, from a watch opened before the DELETE)
  suite     what the suite's 3 s polls make of sa + gone: the create wait is 0 when the
            ServiceAccount is there at the immediate poll, else the next multiple of 3 s;
            the delete wait is the next multiple of 3 s after `gone` (its immediate poll
            comes before the namespace can go)

With --kcm-log kube-controller-manager runs at -v=4 and the namespace controller's lines
of its log (namespace_controller.go, namespaced_resources_deleter.go) are printed. Every
wait is bounded (--timeout per phase).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.e2e.common import log, machine
from devtools.cluster.localcluster import LocalCluster
from devtools.cluster.stack import TektonStack
from devtools.fakes.fates import FateWebhook, fate_annotations

POLL = 0.02
SUITE_POLL = 3.0
CONTENTS = ("empty", "finished", "running")
KCM_FILES = ("namespace_controller.go", "namespaced_resources_deleter.go")


def suite_wait(seconds: float, immediate_ok: bool) -> float:
    """What wait.PollUntilContextTimeout(interval 3 s, immediate) spends on a state
    reached `seconds` after it starts."""
    if immediate_ok:
        return 0.0
    return SUITE_POLL * max(1, math.ceil(seconds / SUITE_POLL))


async def exists(cluster: LocalCluster, path: str) -> bool:
    try:
        await cluster.request("GET", path)
    except RuntimeError as exc:
        if ": 404 " in str(exc):
            return False
        raise
    return True


async def until(check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    """Seconds until `check()` is true, asked every POLL; TimeoutError after `timeout`."""
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not within {timeout} s")
        await asyncio.sleep(POLL)
    return time.monotonic() - start


def taskrun(hold: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "tr", "labels": {"buildrun.shipwright.io/name": "br"}}
    if hold:
        meta["annotations"] = fate_annotations(fate="hold")
    return {"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": meta,
            "spec": {"taskSpec": {"steps": [{"name": "build", "image": "busybox",
                                             "command": ["/kaniko/executor"]}]}}}


async def fill(cluster: LocalCluster, namespace: str, hold: bool, timeout: float) -> None:
    """The objects a spec leaves in its namespace, the TaskRun's pod Succeeded or Running."""
    core = f"/api/v1/namespaces/{namespace}"
    shp = f"/apis/shipwright.io/v1beta1/namespaces/{namespace}"
    await cluster.request("POST", f"{core}/secrets",
                          {"metadata": {"name": "push"}, "stringData": {"token": "x"}})
    await cluster.request("POST", f"{core}/serviceaccounts", {"metadata": {"name": "br-sa"}})
    await cluster.request("POST", f"{shp}/builds", {
        "apiVersion": "shipwright.io/v1beta1", "kind": "Build", "metadata": {"name": "b"},
        "spec": {"source": {"type": "Git", "git": {"url": "https://example.invalid/x"}},
                 "strategy": {"kind": "ClusterBuildStrategy", "name": "none"},
                 "output": {"image": "registry.invalid/x"}}})
    await cluster.request("POST", f"{shp}/buildruns", {
        "apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun", "metadata": {"name": "br"},
        "spec": {"build": {"name": "b"}}})
    await cluster.request("POST", f"/apis/tekton.dev/v1/namespaces/{namespace}/taskruns",
                          taskrun(hold))
    want = "Running" if hold else "Succeeded"

    async def pod_there() -> bool:
        pods = (await cluster.request("GET", f"{core}/pods"))["items"]
        return bool(pods) and all((p.get("status") or {}).get("phase") == want for p in pods)

    await until(pod_there, timeout)


async def first_write(cluster: LocalCluster, namespace: str, resource_version: str,
                      deleted: asyncio.Event) -> float | None:
    """When (time.monotonic()) the namespace was first modified, after `deleted` was set,
    with status conditions (the namespace controller's); None if it went without."""
    path = (f"/api/v1/namespaces?watch=1&fieldSelector=metadata.name%3D{namespace}"
            f"&resourceVersion={resource_version}&timeoutSeconds=300")
    headers = {"Authorization": f"Bearer {cluster.admin.token}"}
    async with aiohttp.ClientSession() as session, session.get(
            cluster.url + path, headers=headers, ssl=cluster.ssl_context()) as resp:
        async for line in resp.content:
            event = orjson.loads(line)
            conditions = (event["object"].get("status") or {}).get("conditions")
            if event["type"] == "MODIFIED" and conditions and deleted.is_set():
                return time.monotonic()
            if event["type"] == "DELETED":
                return None
    return None


async def one_round(cluster: LocalCluster, namespace: str, content: str,
                    timeout: float) -> dict[str, float]:
    sa_path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    created = await cluster.request("POST", "/api/v1/namespaces",
                                    {"metadata": {"name": namespace}})
    t0 = time.monotonic()
    sa_at_once = await exists(cluster, sa_path)
    sa = 0.0 if sa_at_once else (time.monotonic() - t0) + await until(
        lambda: exists(cluster, sa_path), timeout)
    if content != "empty":
        await fill(cluster, namespace, content == "running", timeout)
    deleted = asyncio.Event()
    watch = asyncio.ensure_future(first_write(
        cluster, namespace, created["metadata"]["resourceVersion"], deleted))
    await cluster.request("DELETE", f"/api/v1/namespaces/{namespace}",
                          {"gracePeriodSeconds": 0})
    t1 = time.monotonic()
    deleted.set()
    gone = await until(lambda: absent(cluster, namespace), timeout)
    first_at = await asyncio.wait_for(watch, timeout)
    return {"sa": sa, "gone": gone, "first": first_at - t1 if first_at else math.nan,
            "suite": suite_wait(sa, sa_at_once) + suite_wait(gone, False)}


async def absent(cluster: LocalCluster, namespace: str) -> bool:
    return not await exists(cluster, f"/api/v1/namespaces/{namespace}")


def table(rows: dict[str, list[dict[str, float]]]) -> list[str]:
    keys = ("sa", "gone", "first", "suite")
    out = ["| content | " + " | ".join(f"{k} median / max (s)" for k in keys) + " |",
           "|---|" + "---|" * len(keys)]
    for content, rs in rows.items():
        cells = []
        for key in keys:
            values = [r[key] for r in rs if not math.isnan(r[key])]
            cells.append(f"{statistics.median(values):.2f} / {max(values):.2f}"
                         if values else "-")
        out.append(f"| {content} | " + " | ".join(cells) + " |")
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--contents", nargs="+", choices=CONTENTS, default=list(CONTENTS))
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--kcm-log", action="store_true",
                        help="kube-controller-manager at -v=4; print its namespace lines")
    parser.add_argument("--workdir", type=Path, help="keep the stack's logs here")
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="ns-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        kcm_args = ["-v=4"] if args.kcm_log else []
        async with TektonStack(workdir, controller_manager_args=kcm_args) as stack, \
                FateWebhook(stack.cluster):
            log(f"stack up: {stack.timings}")
            rows: dict[str, list[dict[str, float]]] = {c: [] for c in args.contents}
            for i in range(args.repeat):
                for content in args.contents:
                    r = await one_round(stack.cluster, f"ns-{content}-{i}", content,
                                        args.timeout)
                    rows[content].append(r)
                    log(f"{content} #{i}: " + " ".join(f"{k} {v:.2f}" for k, v in r.items()))
        print("\n".join(["", *table(rows)]))
        if args.kcm_log:
            print("\nkube-controller-manager, the namespace controller's lines:")
            for line in (workdir / "kube-controller-manager.log").read_text(
                    errors="replace").splitlines():
                if any(f in line for f in KCM_FILES):
                    print(line)
    print(machine())


if __name__ == "__main__":
    asyncio.run(main())

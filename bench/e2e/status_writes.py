"""What one BuildRun status write costs the API server: by the verb that carries it and by
the CEL rules of the CRD it is checked against (issue 34).

One etcd and kube-apiserver (LocalCluster). The BuildRun CRD of manifests/crds is copied
into other API groups, one copy per rule set, so every variant is served side by side by
the same process and no CRD changes while anything is timed:

  ours        the CRD as manifests/crds has it (the spec's immutability as one rule)
  per-field   the same with that rule split into one rule per spec field, as it was
              before (devtools.crds.crdgen.spec_field_checks, each with its message)
  no-rules    every x-kubernetes-validations removed (Shipwright's CRD has none)

Each copy gets --objects BuildRuns with the status the controller writes at a start.
Then, --rounds times, each mode writes a new status to every BuildRun of its copy (the
Running condition with a new message and time, as the controller's progress write),
--concurrency at a time, the modes taking turns (their order rotated each round). Every
write is a status update the CRD's rules check in full; the terminal one differs only in
what it carries, and it can be written once, so it would need a new BuildRun per write:

  update      PUT of the BuildRun as read to its status subresource (status_writes.
              write_status now), on each of the three copies
  patch       a merge PATCH of {metadata.resourceVersion, status} to the status
              subresource (write_status before), on `ours`

Per mode and round: writes/s and the CPU ms per write of kube-apiserver and etcd
(utime+stime from /proc). Printed: per mode, the median over its rounds. Noise: the API
server's garbage collector runs when it will; blocks of 500 writes moved between 2.2 and
7.4 ms a write, so a round writes a few thousand (several collections each), and the
medians over alternated rounds are what compare.

    .venv/bin/python -m bench.e2e.status_writes --objects 2000 --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.e2e.common import (
    NS,
    CpuMeter,
    bounded,
    command_line,
    load_kube,
    log,
    machine,
    server_pids,
    wait_quiet,
    write_results,
)
from controller.buildrun.status_writes import with_condition
from controller.runtime.kube import JSON, Kube, Resource
from controller.shipwright.resources import BUILDRUNS
from devtools.cluster import fixtures
from devtools.cluster.localcluster import LocalCluster
from devtools.crds.crdgen import spec_field_checks

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", namespaced=False)
MODES = ("update ours", "patch ours", "update per-field", "update no-rules")


def without_rules(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("x-kubernetes-validations", None)
        for value in node.values():
            without_rules(value)
    elif isinstance(node, list):
        for value in node:
            without_rules(value)


def rule_sets(schema: JSON) -> dict[str, JSON]:
    """The three schemas, from the BuildRun CRD's own."""
    per_field = copy.deepcopy(schema)
    per_field["properties"]["spec"]["x-kubernetes-validations"] = [
        {"rule": rule, "message": message} for rule, message in spec_field_checks()]
    none = copy.deepcopy(schema)
    without_rules(none)
    return {"ours": copy.deepcopy(schema), "per-field": per_field, "no-rules": none}


async def serve_copies(kube: Kube) -> dict[str, Resource]:
    """The BuildRun CRD copied into group <rule set>.bench.example.com, one per rule set."""
    crd = await kube.get(CRDS, None, f"{BUILDRUNS.plural}.{BUILDRUNS.group}")
    version = next(v for v in crd["spec"]["versions"] if v["storage"])
    out = {}
    for name, schema in rule_sets(version["schema"]["openAPIV3Schema"]).items():
        group = f"{name}.bench.example.com"
        await kube.create(CRDS, None, {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{BUILDRUNS.plural}.{group}"},
            "spec": {**crd["spec"], "group": group, "conversion": {"strategy": "None"},
                     "versions": [{**version, "schema": {"openAPIV3Schema": schema}}]}})
        out[name] = Resource(group, version["name"], BUILDRUNS.plural, BUILDRUNS.kind)
    return out


def started(name: str, at: str) -> JSON:
    status = {"startTime": at, "taskRunName": f"{name}-run",
              "executor": {"kind": "TaskRun", "name": f"{name}-run"},
              "buildSpec": fixtures.build_spec()}
    return with_condition(status, "Unknown", "Running",
                          "Not all Steps in the Task have finished executing", at)


def progressed(status: JSON, step: int) -> JSON:
    at = f"2026-12-05T08:{step // 60 % 60:02d}:{step % 60:02d}Z"
    return with_condition(status, "Unknown", "Running", f"step {step} of the build", at)


def writer(kube: Kube, mode: str, resource: Resource, objects: dict[str, JSON],
           step: int) -> Callable[[str], Awaitable[object]]:
    """Writes `mode`'s way; keeps what the API server answered, for the next write."""
    verb = mode.split()[0]

    async def write(name: str) -> None:
        br = objects[name]
        status = progressed(br["status"], step)
        if verb == "update":
            written = await kube.put(resource, NS, name, {**br, "status": status},
                                     subresource="status")
        else:
            written = await kube.patch(resource, NS, name, {
                "metadata": {"resourceVersion": br["metadata"]["resourceVersion"]},
                "status": status}, subresource="status")
        written["metadata"].pop("managedFields", None)  # as the cache holds it
        objects[name] = written
    return write


async def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet = await wait_quiet(max_wait=args.quiet_wait)
    with tempfile.TemporaryDirectory() as tmp:
        async with LocalCluster(Path(tmp) / "cluster") as cluster:
            kube = (await load_kube(cluster)).with_field_manager("bench")
            try:
                await fixtures.create_namespace(kube, NS)
                copies = await serve_copies(kube)
                await asyncio.sleep(5)  # the new groups' handlers and OpenAPI settle
                deadline = time.monotonic() + args.timeout
                per_copy = args.objects
                objects: dict[str, dict[str, JSON]] = {c: {} for c in copies}
                for name, resource in copies.items():
                    async def make(br: str, resource: Resource = resource,
                                   into: dict[str, JSON] = objects[name]) -> None:
                        body = fixtures.buildrun(br)
                        body["apiVersion"] = resource.api_version
                        made = await kube.create(resource, NS, body)
                        made = await kube.patch(resource, NS, br, {
                            "metadata": {"resourceVersion": made["metadata"]["resourceVersion"]},
                            "status": started(br, "2026-12-05T07:59:00Z")},
                            subresource="status")
                        made["metadata"].pop("managedFields", None)  # as the cache holds it
                        into[br] = made
                    await bounded([f"br-{i:06d}" for i in range(per_copy)], make,
                                  concurrency=args.concurrency, deadline=deadline)
                log(f"{per_copy} BuildRuns in each of {len(copies)} copies")
                await asyncio.sleep(5)
                blocks: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
                meter = CpuMeter(server_pids(cluster))
                step = 0
                for r in range(args.rounds):
                    # Rotated each round, so no mode always follows the same one.
                    for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                        rules = mode.split()[1]
                        names = sorted(objects[rules])
                        step += 1
                        meter.start()
                        done = await bounded(names, writer(kube, mode, copies[rules],
                                                           objects[rules], step),
                                             concurrency=args.concurrency, deadline=deadline)
                        cpu = meter.stop()
                        block = {"writes_per_s": round(len(names) / done.seconds, 1),
                                 "apiserver_ms": round(1000 * cpu["apiserver"] / len(names), 3),
                                 "etcd_ms": round(1000 * cpu["etcd"] / len(names), 3),
                                 "others_s": cpu["others"], "steal_s": cpu["steal"]}
                        blocks[mode].append(block)
                        log(f"{mode}: {block}")
            finally:
                await kube.close()
    medians = {m: {k: round(statistics.median(b[k] for b in bs), 3)
                   for k in ("writes_per_s", "apiserver_ms", "etcd_ms")}
               for m, bs in blocks.items()}
    return {"machine": machine(), "command": command_line(), "quiet_before": quiet,
            "objects": args.objects, "rounds": args.rounds, "medians": medians,
            "blocks": blocks}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=2000, help="BuildRuns per copy of the CRD")
    p.add_argument("--rounds", type=int, default=10, help="timed writes of each per mode")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    p.add_argument("--timeout", type=float, default=1200, help="bound on the run, seconds")
    p.add_argument("--quiet-wait", type=float, default=300, metavar="SECONDS",
                   help="wait at most this long for a quiet machine first")
    args = p.parse_args()
    out = asyncio.run(run(args))
    print(f"machine: {out['machine']}\ncommand: {out['command']}")
    print("| mode | rounds | writes/s | kube-apiserver CPU ms per write | etcd CPU ms per write |")
    print("|---|---:|---:|---:|---:|")
    for mode, med in out["medians"].items():
        print(f"| {mode} | {len(out['blocks'][mode])} | {med['writes_per_s']} "
              f"| {med['apiserver_ms']} | {med['etcd_ms']} |")
    print(f"raw: {write_results('status-writes', out)}")


if __name__ == "__main__":
    main()

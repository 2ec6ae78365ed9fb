"""Watch-event decoding: stdlib json vs orjson, on BuildRun events shaped like
the API server sends them (a finished BuildRun with status and buildSpec).

Prints events decoded per second for each and the ratio. Usage:
    .venv/bin/python bench/decode_bench.py [--events 20000]
"""

from __future__ import annotations

import argparse
import json
import time

import orjson


def event(i: int) -> bytes:
    spec = {"strategy": {"name": "kaniko", "kind": "BuildStrategy"},
            "source": {"git": {"url": "https://example.com/org/app.git", "revision": "main"}},
            "output": {"image": f"registry.example.com/org/app-{i}:latest"},
            "paramValues": [{"name": "dockerfile", "value": "Dockerfile"}], "timeout": "10m"}
    obj = {
        "apiVersion": "shipwright.io/v1beta1", "kind": "BuildRun",
        "metadata": {"name": f"app-{i}", "namespace": "team-a", "uid": f"{i:08d}-aaaa-bbbb",
                     "resourceVersion": str(100000 + i), "generation": 1,
                     "creationTimestamp": "2026-12-02T12:00:00Z",
                     "labels": {"build.shipwright.io/name": "app"}},
        "spec": {"build": {"name": "app"}, "serviceAccount": "builder"},
        "status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                                   "message": "All Steps have completed executing",
                                   "lastTransitionTime": "2026-12-02T12:01:00Z"}],
                   "startTime": "2026-12-02T12:00:01Z",
                   "completionTime": "2026-12-02T12:01:00Z",
                   "taskRunName": f"app-{i}-0123abcd", "buildSpec": spec,
                   "output": {"digest": "sha256:" + "ab" * 32}},
    }
    return json.dumps({"type": "MODIFIED", "object": obj}).encode() + b"\n"


def rate(decode: object, lines: list[bytes]) -> float:
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        for line in lines:
            decode(line)  # type: ignore[operator]
        best = max(best, len(lines) / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20000)
    lines = [event(i) for i in range(parser.parse_args().events)]
    size = sum(map(len, lines)) / len(lines)
    stdlib, fast = rate(json.loads, lines), rate(orjson.loads, lines)
    print(f"event size: {size:.0f} bytes, {len(lines)} events, best of 5")
    print(f"{'decoder':<10}{'events/s':>12}")
    print(f"{'json':<10}{stdlib:>12,.0f}")
    print(f"{'orjson':<10}{fast:>12,.0f}")
    print(f"orjson/json: {fast / stdlib:.2f}x")


if __name__ == "__main__":
    main()

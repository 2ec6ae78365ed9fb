"""Prometheus helpers for the manifest, dashboard and docs checks.

- `metric_names`: the metric names a PromQL expression selects.
- `parse_exposition`: family types and sample names from a /metrics scrape.
- `prometheus_binary`: promtool or prometheus, built once from the Go module
  proxy into a cache outside the repo (as hack/localcluster/build does for the
  API server), so rules are checked by Prometheus' own parser and evaluator.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# Prometheus 3.x is published to the Go module proxy as v0.3MM.P.
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_VERSION = "v0.316.0"

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
}
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects (functions, keywords, label names,
    durations and Grafana variables are not names)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = _GROUPING.sub(" ", s)
    names = set()
    for match in _IDENT.finditer(s):
        name, start = match.group(0), match.start()
        if start and (s[start - 1].isdigit() or s[start - 1] in ".$"):
            continue  # 1e3, 0.5, $variable
        if s[match.end():].lstrip().startswith("("):
            continue  # a function
        if name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def parse_exposition(text: str) -> tuple[dict[str, str], set[str]]:
    """({family name as in # TYPE: type}, {sample names}) of Prometheus text format."""
    types: dict[str, str] = {}
    samples: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            samples.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return types, samples


def family_of(name: str, types: dict[str, str]) -> str | None:
    """The declared family a sample name belongs to, by Prometheus' suffix rules."""
    if types.get(name) in ("counter", "gauge", "untyped"):
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and types.get(base) in ("histogram", "summary"):
            if suffix == "_bucket" and types[base] != "histogram":
                return None
            return base
    return None


def cache_root() -> Path:
    root = os.environ.get("BUILDRUN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "buildrun-controller",
    )
    return Path(root)


# `promtool check rules` / `test rules` need no service discovery, the render's
# `prometheus` (devtools/dashboard/render.py: one static scrape config) neither, and the
# in-cluster test's (tests/cluster/test_in_cluster.py) only Kubernetes', as the Prometheus
# Operator's ServiceMonitors do: Prometheus' `remove_all_sd` tag (its README, "Service
# discovery plugins") keeps static, file and HTTP and leaves out the cloud SDKs (AWS,
# Azure, GCE, Oracle's...): 4887 Go files to compile instead of 15530 (BENCHMARKS-journal.md
# "Sharing the cold builds"); `enable_kubernetes_sd` puts Kubernetes' back into
# `prometheus` (promtool imports it itself: the same packages either way).
_GO_INSTALL_FLAGS = ("-trimpath", "-ldflags=-s -w", "-tags=remove_all_sd,enable_kubernetes_sd")


def prometheus_binary(name: str) -> Path:
    """`promtool` or `prometheus` at PROMETHEUS_VERSION; built with `go install` the
    first time (a few minutes), found in the cache after that, keyed by the version and
    the build flags."""
    key = hashlib.sha256(" ".join((PROMETHEUS_VERSION, *_GO_INSTALL_FLAGS)).encode()).hexdigest()
    out = cache_root() / "prometheus" / f"{PROMETHEUS_VERSION}-{key[:16]}" / name
    if out.is_file():
        return out
    if shutil.which("go") is None:
        raise RuntimeError(f"building {name} needs Go (make test needs it for the API server too)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        env = {**os.environ, "GOBIN": tmp, "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}
        subprocess.run(
            ["go", "install", *_GO_INSTALL_FLAGS,
             f"{PROMETHEUS_MODULE}/cmd/{name}@{PROMETHEUS_VERSION}"],
            check=True, env=env, cwd=tmp, stdout=subprocess.DEVNULL,
        )
        # Rename last, so an interrupted build never leaves a half-written binary.
        os.replace(Path(tmp) / name, out)
    return out

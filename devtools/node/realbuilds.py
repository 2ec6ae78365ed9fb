"""Real builds on the stack's real node (devtools.node.realnode): the sample
repository the Git server serves, and Shipwright's own sample Builds and strategies
(samples/v1beta1 of v0.20.13, read from the Go module cache) pointed at it.

The sample repository stands in for github.com/shipwright-io/sample-go, which the
samples clone: a Dockerfile and a program under `docker-build/`, the samples'
contextDir. Its Dockerfile builds FROM the busybox image in the stack's registry and
runs the program while building, so a build's log shows BUILD_LINE and GREETING.

A sample Build is changed only where this machine differs from the one it was written
for: the source URL (the Git server), the output image (the stack's registry, plain
HTTP, so `output.insecure` and the strategy's `registries-insecure` name it), and the
nodeSelector and toleration that put its pod on the real node. Its strategy is applied
as written: its image (quay.io/containers/buildah:<tag>) comes from the stack's
registry, which containerd uses as quay.io's mirror.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from devtools.node.gitserver import Commit
from devtools.node.realnode import RealNode, placement
from devtools.shipwright.source import samples_dir

JSON = dict[str, Any]

SAMPLE_REPOSITORY = "sample-go"
CONTEXT_DIR = "docker-build"
# What the sample prints while it is built (its Dockerfile's RUN) and when it runs.
BUILD_LINE = "sample-go: building the hello program"
GREETING = "Hello from a build that really ran"

BUILDAH_MANAGED_PUSH = "build_buildah_shipwright_managed_push_cr.yaml"
BUILDAH_STRATEGY_PUSH = "build_buildah_strategy_managed_push_cr.yaml"


def sample_files(node: RealNode) -> dict[str, str]:
    """The sample repository's files (path -> text)."""
    return {
        "README.md": "A sample program for real builds on the test stack's node.\n",
        f"{CONTEXT_DIR}/hello.sh": f"#!/bin/sh\necho '{GREETING}'\n",
        f"{CONTEXT_DIR}/Dockerfile": (
            f"FROM {node.registry.base_image()}\n"
            "COPY hello.sh /usr/local/bin/hello\n"
            f"RUN echo '{BUILD_LINE}' && chmod 755 /usr/local/bin/hello && /usr/local/bin/hello\n"
            'CMD ["/usr/local/bin/hello"]\n'
        ),
    }


def write_sample(node: RealNode, folder: Path) -> Path:
    """The sample's files in `folder` (a local checkout, for `shp build upload`)."""
    for path, text in sample_files(node).items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if path.endswith(".sh"):
            target.chmod(0o755)
    return folder


_repositories: dict[int, Commit] = {}


def sample_repository(node: RealNode) -> Commit:
    """The sample repository on `node`'s Git server (made on the first call)."""
    if id(node) not in _repositories:
        _repositories[id(node)] = node.create_repository(SAMPLE_REPOSITORY, sample_files(node))
    return _repositories[id(node)]


def shipwright_sample(kind: str, file: str) -> list[JSON]:
    """The objects of Shipwright's samples/v1beta1/<kind>/**/<file>, as written."""
    (path,) = samples_dir().glob(f"{kind}/**/{file}")
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def sample_strategy(build: JSON) -> JSON:
    """The sample (Cluster)BuildStrategy a sample Build names, as written."""
    name = build["spec"]["strategy"]["name"]
    for path in sorted(samples_dir().glob("buildstrategy/**/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["metadata"]["name"] == name:
                return dict(doc)
    raise LookupError(f"no sample strategy named {name}")


def on_real_node(node: RealNode, build: JSON, namespace: str, *, name: str | None = None,
                 image_repository: str | None = None) -> JSON:
    """A sample Build changed only where this machine differs (see the module's doc):
    its Git source the sample repository, its output the stack's registry at
    `image_repository` (default <namespace>/<name>), its pod on the real node."""
    build = copy.deepcopy(build)
    name = name or build["metadata"]["name"]
    build["metadata"] = {"name": name}
    spec = build["spec"]
    sample_repository(node)
    spec["source"]["git"]["url"] = node.git_url(SAMPLE_REPOSITORY)
    spec["output"] = {"image": node.registry.image(image_repository or f"{namespace}/{name}"),
                      "insecure": True}
    params = [p for p in spec.get("paramValues") or [] if p["name"] != "registries-insecure"]
    params.append({"name": "registries-insecure", "values": [{"value": node.registry.address}]})
    spec["paramValues"] = params
    spec.update(placement())
    return build

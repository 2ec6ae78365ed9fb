"""The real node's images and the registry that serves them.

hack/node-images/build makes every image a pod on the real node runs, from source and
Debian's packages, into a registry's storage in the cache, with images.json saying which
is which (NodeImages). Each node runs its own registry (Registry: Debian's
docker-registry, distribution 2.8, on 127.0.0.1:<port>), its storage a copy of that one
(blobs hard-linked), so it starts with every image a pod here needs; builds push to it,
and what they pushed is read back from it (`pushed`), the truth a build's reported
digest is held to. containerd pulls from it as the mirror of every host the images are
named under (`hosts`), so a pod names an image as Shipwright's samples do.

Images a strategy names that this machine cannot have are served under the strategy's
own name as one built here (STAND_INS), as buildah is Debian's under quay.io's name.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from devtools.cluster.localcluster import free_port

# Images Shipwright's strategies name that the node serves as one built here, under the
# strategy's own name (as buildah is Debian's under quay.io's): its integration suite's
# error-result strategy runs `sh -c 'printf ...; return 1'` on alpine:latest, whose sh
# is BusyBox's ash, which is what the shell image is. name -> NodeImages attribute.
STAND_INS = {"docker.io/library/alpine:latest": "shell"}


@dataclass(frozen=True)
class NodeImages:
    """What hack/node-images/build made (its images.json) and the registry storage."""

    folder: Path
    pause: str
    shell: str  # Tekton's shell image; busybox, also the sample's base image
    tekton: Mapping[str, str]  # entrypoint, nop, workingdirinit, sidecarlogresults
    shipwright: Mapping[str, str]  # git, bundle, waiter, image-processing
    buildah: tuple[str, ...]  # quay.io/containers/buildah:<tag> as Shipwright's samples name it
    mirrors: tuple[str, ...]  # registry hosts served from the stack's registry

    @classmethod
    def load(cls, folder: Path) -> NodeImages:
        data = json.loads((folder / "images.json").read_text())
        return cls(folder, data["pause"], data["shell"], data["tekton"], data["shipwright"],
                   tuple(data["buildah"]), tuple(data["mirrors"]))

    def tekton_flags(self) -> dict[str, str]:
        """Tekton controller flags naming these images (its config/controller.yaml's)."""
        return {"-entrypoint-image": self.tekton["entrypoint"],
                "-nop-image": self.tekton["nop"],
                "-sidecarlogresults-image": self.tekton["sidecarlogresults"],
                "-workingdirinit-image": self.tekton["workingdirinit"],
                "-shell-image": self.shell}

    def shipwright_env(self) -> dict[str, str]:
        """The environment variables Shipwright's controller (and ours) reads the helper
        steps' images from (controller.buildrun.config)."""
        return {"GIT_CONTAINER_IMAGE": self.shipwright["git"],
                "BUNDLE_CONTAINER_IMAGE": self.shipwright["bundle"],
                "WAITER_CONTAINER_IMAGE": self.shipwright["waiter"],
                "IMAGE_PROCESSING_CONTAINER_IMAGE": self.shipwright["image-processing"]}

    def in_registry(self, registry: str, image: str) -> str:
        """`image` (named under one of the mirrored hosts) as pulled from `registry`."""
        host, _, rest = image.partition("/")
        assert host in self.mirrors, image
        return f"{registry}/{rest}"

    def stand_ins(self) -> dict[str, str]:
        """STAND_INS as name -> the image of this set served under it."""
        return {name: getattr(self, attribute) for name, attribute in STAND_INS.items()}


class Registry:
    """One node's registry: its address, the storage and configuration it serves, and
    what is in it. `argv()` prepares both and says how to serve them; the node runs it as
    a child and waits for `serving()`."""

    def __init__(self, workdir: Path, images: NodeImages) -> None:
        self.images = images
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._storage = workdir / "registry"
        self._config = workdir / "registry.yml"

    def argv(self) -> list[str]:
        """Copies the build's storage (each STAND_IN tagged in it) and writes the
        configuration; the command that serves them, until SIGTERM."""
        _copy_registry(self.images.folder / "registry", self._storage)
        for name, image in self.images.stand_ins().items():
            _tag_as(self._storage, image, name)
        self._config.write_text(yaml.safe_dump({
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self._storage)},
                        "delete": {"enabled": True}},
            "http": {"addr": self.address, "secret": secrets.token_hex(16)},
        }))
        return ["docker-registry", "serve", str(self._config)]

    def serving(self) -> bool:
        """Whether it answers its API (blocking, at most a second)."""
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def hosts(self) -> list[str]:
        """Every host a pod here pulls from this registry (containerd's mirrors): those
        hack/node-images/build names its images under, the STAND_INS' others, and its
        own address."""
        stand_in_hosts = sorted({name.partition("/")[0] for name in STAND_INS}
                                - set(self.images.mirrors))
        return [*self.images.mirrors, *stand_in_hosts, self.address]

    def base_image(self) -> str:
        """An image to build FROM, as a build in a pod here pulls it (over plain HTTP)."""
        return self.images.in_registry(self.address, self.images.shell)

    def image(self, repository: str, tag: str = "latest") -> str:
        """Where a build pushes: `repository` in this registry."""
        return f"{self.address}/{repository}:{tag}"

    def manifest_digest(self, repository: str, tag: str = "latest") -> str | None:
        """The registry's digest of `repository:tag` (its Docker-Content-Digest, as a
        client resolving the tag sees it); None when it has no such manifest."""
        accept = ", ".join(("application/vnd.oci.image.index.v1+json",
                            "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json",
                            "application/vnd.docker.distribution.manifest.v2+json"))
        request = urllib.request.Request(
            f"http://{self.address}/v2/{repository}/manifests/{tag}", method="HEAD",
            headers={"Accept": accept})
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return str(resp.headers["Docker-Content-Digest"])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def pushed(self, image: str) -> str | None:
        """manifest_digest of `image` as a build names its output (`image(...)`): what
        the registry holds under that tag, None when nothing was pushed there."""
        host, _, _ = image.partition("/")
        if host != self.address:
            raise ValueError(f"{image} is not in this node's registry ({self.address})")
        return self.manifest_digest(*_repository_and_tag(image))


def _copy_registry(source: Path, target: Path) -> None:
    """The registry's storage: blobs hard-linked (written once, never changed in place),
    the rest (tag and layer links, which a push rewrites in place) copied."""
    v2 = Path("docker/registry/v2")
    (target / v2).mkdir(parents=True)
    subprocess.run(["cp", "-a", "--link", str(source / v2 / "blobs"), str(target / v2)],
                   check=True)
    shutil.copytree(source / v2 / "repositories", target / v2 / "repositories", symlinks=True)


def _repository_and_tag(image: str) -> tuple[str, str]:
    """("library/busybox", "1.35.0") for "buildrun.test/library/busybox:1.35.0"."""
    _, _, rest = image.partition("/")
    repository, _, tag = rest.rpartition(":")
    return repository, tag


def _tag_as(storage: Path, image: str, name: str) -> None:
    """The registry's `image` also served as `name` (another host's name is fine: the
    registry mirrors it), before the registry starts: its repository's folder copied
    (the links to its blobs, each a few bytes) with the tag renamed."""
    repositories = storage / "docker/registry/v2/repositories"
    (source, tag), (target, new_tag) = _repository_and_tag(image), _repository_and_tag(name)
    shutil.copytree(repositories / source, repositories / target, symlinks=True)
    tags = repositories / target / "_manifests/tags"
    for other in tags.iterdir():
        if other.name != tag:
            shutil.rmtree(other)
    (tags / tag).rename(tags / new_tag)

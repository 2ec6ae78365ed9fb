"""Which Builds a Secret event wakes: the Build informer's index by referenced Secret
(Shipwright's map function in its build controller.go: the source's credentials or the
output's pushSecret, in the Secret's namespace) and the events that can change a
verdict."""

from __future__ import annotations

from typing import Any

from controller.builds.setup import (
    BUILD_INDEXERS,
    BY_SECRET,
    referenced_secrets,
    secret_appeared_or_vanished,
)
from controller.runtime.kube import key_of
from controller.runtime.store import Store


def build(name: str, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def git(clone_secret: str | None = None) -> dict[str, Any]:
    git: dict[str, Any] = {"url": "https://example.com/x"}
    if clone_secret:
        git["cloneSecret"] = clone_secret
    return {"type": "Git", "git": git}


def test_each_secret_a_build_validates_is_indexed_in_its_namespace() -> None:
    assert referenced_secrets(build("b", output={"pushSecret": "push"},
                                    source=git("clone"))) == ["ns/push", "ns/clone"]
    oci = {"type": "OCI", "ociArtifact": {"image": "i", "pullSecret": "pull"},
           "git": {"cloneSecret": "ignored"}}
    assert referenced_secrets(build("b", namespace="other", source=oci)) == ["other/pull"]
    # Named twice: one entry, so the Build is woken once.
    assert referenced_secrets(build("b", output={"pushSecret": "s"}, source=git("s"))) == ["ns/s"]
    assert referenced_secrets(build("b", source=git(), output={"image": "x"})) == []
    assert referenced_secrets({"metadata": {"name": "b", "namespace": "ns"}}) == []


def test_the_index_finds_the_builds_naming_a_secret_and_follows_spec_changes() -> None:
    store = Store(BUILD_INDEXERS)
    store.upsert(build("push", output={"pushSecret": "creds"}))
    store.upsert(build("clone", source=git("creds")))
    store.upsert(build("none", source=git()))
    store.upsert(build("elsewhere", namespace="other", output={"pushSecret": "creds"}))

    def woken(secret_key: str) -> list[str]:
        return sorted(key_of(b) for b in store.by_index(BY_SECRET, secret_key))

    assert woken("ns/creds") == ["ns/clone", "ns/push"]
    assert woken("other/creds") == ["other/elsewhere"]
    assert woken("ns/unnamed") == []
    # A spec change moves the Build in the index; a deleted Build leaves it.
    store.upsert(build("push", output={"pushSecret": "new"}))
    assert woken("ns/creds") == ["ns/clone"] and woken("ns/new") == ["ns/push"]
    store.remove("ns/clone")
    assert woken("ns/creds") == []


def test_only_a_secret_appearing_or_vanishing_wakes_builds() -> None:
    assert secret_appeared_or_vanished("ADDED")
    assert secret_appeared_or_vanished("DELETED")
    assert not secret_appeared_or_vanished("MODIFIED")

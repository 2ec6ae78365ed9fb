"""The ServiceAccount a BuildRun's TaskRun runs as, chosen as Shipwright v0.20.13 chooses it
(pkg/reconciler/buildrun/resources/service_accounts.go, credentials.go). Pure: the
reconciler does the reads and writes.

- `spec.serviceAccount: ".generate"`: a ServiceAccount named after the BuildRun, owned by
  it (so it goes with it), labelled `buildrun.shipwright.io/name`, with
  `automountServiceAccountToken: false`; deleted once the BuildRun is done.
- `spec.serviceAccount: NAME`: that ServiceAccount; missing is `ServiceAccountNotFound`.
- none: the namespace's `pipeline` ServiceAccount (OpenShift's) if it exists, else `default`.

Whichever it is gets the push secret (`spec.output.pushSecret` of the BuildRun, else of
the Build) added to its `secrets` when it is not listed there yet. Shipwright adds no other
secret: the source's clone secret reaches the source step another way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.runtime.shapes import at, text
from controller.shipwright.labels import LABEL_BUILDRUN

JSON = dict[str, Any]

GENERATE = ".generate"
PIPELINE = "pipeline"  # OpenShift's default ServiceAccount for builds
DEFAULT = "default"  # every Kubernetes namespace's



@dataclass(frozen=True)
class Choice:
    """Which ServiceAccount to use. `generated`: create `name` for the BuildRun;
    `explicit`: the user named it (missing is their error); neither: the namespace's
    default, the first of `candidates` that exists."""

    name: str
    generated: bool = False
    explicit: bool = False
    candidates: tuple[str, ...] = ()


def requested(buildrun: JSON) -> str | None:
    """spec.serviceAccount as written, or None."""
    return text(at(buildrun, "spec", "serviceAccount")) or None


def is_generated(buildrun: JSON) -> bool:
    return requested(buildrun) == GENERATE


def generated_name(buildrun: JSON) -> str:
    """The generated ServiceAccount's name: the BuildRun's own, as in Shipwright."""
    return str(buildrun["metadata"]["name"])


def choose(buildrun: JSON) -> Choice:
    name = requested(buildrun)
    if name == GENERATE:
        return Choice(generated_name(buildrun), generated=True)
    if name is not None:
        return Choice(name, explicit=True)
    return Choice(DEFAULT, candidates=(PIPELINE, DEFAULT))


def missing_secrets(service_account: JSON | None, push_secret: str | None) -> list[str]:
    """The secrets Shipwright adds to the ServiceAccount: the push secret, unless listed."""
    if not push_secret:
        return []
    listed = {ref.get("name") for ref in (service_account or {}).get("secrets") or []}
    return [] if push_secret in listed else [push_secret]


def secrets_patch(names: list[str]) -> JSON:
    """A strategic merge patch (runtime.kube.STRATEGIC_MERGE_PATCH) adding `names` to a
    ServiceAccount's secrets: core/v1 ServiceAccount.secrets carries patchStrategy=merge,
    patchMergeKey=name, so adding one never drops another writer's."""
    return {"secrets": [{"name": name} for name in names]}


def generated_service_account(buildrun: JSON, push_secret: str | None) -> JSON:
    """The ServiceAccount `.generate` creates: owned by the BuildRun (garbage-collected
    with it), no token automounted, the push secret listed."""
    meta = buildrun["metadata"]
    body: JSON = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": generated_name(buildrun),
            "namespace": meta["namespace"],
            "labels": {LABEL_BUILDRUN: meta["name"]},
            "ownerReferences": [{
                "apiVersion": "shipwright.io/v1beta1",
                "kind": "BuildRun",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }],
        },
        "automountServiceAccountToken": False,
    }
    secrets = missing_secrets(None, push_secret)
    if secrets:
        body["secrets"] = [{"name": name} for name in secrets]
    return body

"""Are the four Shipwright CRDs in this cluster ones this controller can serve? Checked
once at start (`App.create`), so a half-done switch from Shipwright's controller fails
with one line that says what to do, instead of informers retrying a list the API
server cannot answer.

Two states are refused. A CRD whose `status.storedVersions` still lists another version
than v1beta1: objects may be stored in it (Shipwright before v0.12 stored v1alpha1),
our CRDs serve v1beta1 only, and the API server refuses to install ours over it anyway.
And a CRD that converts through a webhook: Shipwright's own CRDs, still in place (our
apply failed or was skipped), whose conversion webhook is Shipwright's. A CRD not
installed yet is no verdict: the informers wait for it, as they always did.
"""

from __future__ import annotations

import logging

from controller.runtime.errors import is_not_found
from controller.runtime.kube import JSON, ApiError, ConfigError, Kube, Resource
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
)

log = logging.getLogger(__name__)

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", namespaced=False)
KINDS = (BUILDS, BUILDRUNS, BUILDSTRATEGIES, CLUSTERBUILDSTRATEGIES)


def crd_name(kind: Resource) -> str:
    return f"{kind.plural}.{kind.group}"


NAMES = tuple(crd_name(kind) for kind in KINDS)
SERVED = "v1beta1"
# What to run, named in the refusal (controller/commands/migrate.py).
MIGRATE = "buildrun-controller migrate-storage"
_HOW = "docs/v1alpha1.md"


def problem(crd: JSON) -> str | None:
    """Why this controller cannot serve `crd`, in one line; None when it can."""
    name = (crd.get("metadata") or {}).get("name", "?")
    stored = [v for v in (crd.get("status") or {}).get("storedVersions") or [] if v != SERVED]
    if stored:
        return (f"CRD {name} lists {', '.join(map(str, stored))} in status.storedVersions: "
                f"objects may still be stored as {stored[0]}, which this controller does not "
                f"serve; run `{MIGRATE}` while Shipwright's CRDs and conversion webhook "
                f"still serve, then apply manifests/crds ({_HOW})")
    strategy = ((crd.get("spec") or {}).get("conversion") or {}).get("strategy") or "None"
    if strategy != "None":
        return (f"CRD {name} converts through a webhook ({strategy}): it is Shipwright's, "
                f"whose webhook this controller does not run; apply manifests/crds over it "
                f"first ({_HOW})")
    return None


async def check(kube: Kube) -> None:
    """Raises ConfigError with `problem`'s line for the first CRD that has one, or when a
    CRD cannot be read. Without permission to read CRDs (RBAC older than this check) it
    says so and goes on."""
    for name in NAMES:
        try:
            crd = await kube.get(CRDS, None, name)
        except ApiError as exc:
            if is_not_found(exc):
                continue
            if exc.status == 403:
                log.warning("cannot read the Shipwright CRDs to check them; the ClusterRole "
                            "in manifests/rbac allows it", extra={"error": exc.message})
                return
            # Any other answer (a 500 while the API server starts, say) stops it in one
            # line too, rather than a traceback; the pod's restart asks again.
            raise ConfigError(f"cannot read CRD {name}: {exc.status} {exc.message}") from exc
        found = problem(crd)
        if found is not None:
            raise ConfigError(found)

"""The informers' stores the BuildRun reconciler reads, and its one way to read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.runtime.kube import JSON, SERVICEACCOUNTS, Kube, Resource
from controller.runtime.store import Store
from controller.shipwright.resources import (
    BUILDRUNS,
    BUILDS,
    BUILDSTRATEGIES,
    CLUSTERBUILDSTRATEGIES,
    TASKRUNS,
)


@dataclass(frozen=True)
class Caches:
    """One Store per kind the reconciler reads. A miss is asked of the API server
    (`read`), so an empty store is slower, never wrong."""

    buildruns: Store = field(default_factory=Store)
    taskruns: Store = field(default_factory=Store)
    builds: Store = field(default_factory=Store)
    strategies: Store = field(default_factory=Store)
    cluster_strategies: Store = field(default_factory=Store)
    service_accounts: Store = field(default_factory=Store)

    def store(self, resource: Resource) -> Store:
        stores = {BUILDRUNS: self.buildruns, TASKRUNS: self.taskruns, BUILDS: self.builds,
                  BUILDSTRATEGIES: self.strategies,
                  CLUSTERBUILDSTRATEGIES: self.cluster_strategies,
                  SERVICEACCOUNTS: self.service_accounts}
        return stores[resource]

    async def read(self, kube: Kube, resource: Resource, namespace: str,
                   name: str) -> JSON | None:
        """From the cache; a miss is asked of the API server, so an object the watch
        has not delivered yet is found and an absence is confirmed before any verdict
        (a terminal status cannot be taken back)."""
        cached = self.store(resource).get(f"{namespace}/{name}" if resource.namespaced
                                          else name)
        if cached is not None:
            return cached
        return await kube.get_or_none(resource, namespace, name)

"""Kubernetes Events, so `kubectl describe buildrun` shows each transition.

An Event is a courtesy to humans: failing to write one is logged and never
fails a reconcile.
"""

from __future__ import annotations

import datetime
import logging

from controller.kube import EVENTS, JSON, Kube

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, kube: Kube, component: str, instance: str) -> None:
        self.kube = kube
        self.component = component
        self.instance = instance

    async def record(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.kube.create(EVENTS, meta["namespace"], body)
        except Exception as exc:
            log.warning("could not record event", extra={"reason": reason, "error": str(exc)})

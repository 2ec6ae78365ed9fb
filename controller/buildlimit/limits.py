"""Which finished BuildRuns of a Build its retention limits delete: pure, no I/O.

Shipwright's rule (pkg/reconciler/buildlimitcleanup, v0.20.13): BuildRuns whose
Succeeded condition is True count against `succeededLimit`, those with False
against `failedLimit`; beyond a limit, the oldest by creationTimestamp go. Running
BuildRuns (Unknown, or no condition yet) never count and are never deleted.
Shipwright sorts with an unstable sort, so which of two BuildRuns created in the
same second goes first is arbitrary there; here the name breaks the tie, so the
same cache always gives the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from controller.runtime.shapes import at, mapping
from controller.shipwright.conditions import succeeded_condition

Kind = Literal["succeeded", "failed"]

# The Succeeded condition's status each limit counts.
_COUNTED: dict[Kind, str] = {"succeeded": "True", "failed": "False"}


@dataclass(frozen=True)
class Limits:
    """How many finished BuildRuns of each kind a Build keeps; None means no limit."""

    succeeded: int | None = None
    failed: int | None = None

    def __bool__(self) -> bool:
        return self.succeeded is not None or self.failed is not None

    def of(self, kind: Kind) -> int | None:
        return self.succeeded if kind == "succeeded" else self.failed


def limits_of(build: dict[str, Any]) -> Limits:
    """A Build's limits. The CRD admits only integers from 1; anything else the schema
    could not stop (a CRD without that rule, an old stored object) means no limit,
    never "delete everything"."""
    retention = mapping(at(build, "spec", "retention"))
    return Limits(_limit(retention.get("succeededLimit")), _limit(retention.get("failedLimit")))


def _limit(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def finished_kind(buildrun: dict[str, Any]) -> Kind | None:
    """Which limit a BuildRun counts against, or None while it has no outcome."""
    cond = succeeded_condition(buildrun.get("status")) or {}
    for kind, status in _COUNTED.items():
        if cond.get("status") == status:
            return kind
    return None


def victims(limits: Limits, buildruns: list[dict[str, Any]]) -> list[tuple[Kind, dict[str, Any]]]:
    """The BuildRuns to delete, oldest first within each kind, with the limit each exceeds."""
    chosen: list[tuple[Kind, dict[str, Any]]] = []
    for kind in _COUNTED:
        limit = limits.of(kind)
        if limit is None:
            continue
        finished = sorted((b for b in buildruns if finished_kind(b) == kind), key=_age)
        chosen += [(kind, b) for b in finished[: max(len(finished) - limit, 0)]]
    return chosen


def _age(buildrun: dict[str, Any]) -> tuple[str, str]:
    # RFC 3339 timestamps in UTC ("2026-12-03T09:00:00Z") sort as strings.
    meta = buildrun.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("name") or "")

"""Kubernetes timestamps: metav1.Time (whole seconds) and MicroTime, always UTC."""

from __future__ import annotations

import datetime
from collections.abc import Callable

# What reads the time where a test may want to set it (`now` in production).
Clock = Callable[[], datetime.datetime]


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def format_time(t: datetime.datetime) -> str:
    """metav1.Time as the API server writes it: RFC 3339, whole seconds, Z."""
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(t: datetime.datetime) -> str:
    """metav1.MicroTime (Leases, events.k8s.io): RFC 3339 with microseconds, Z."""
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    """Either form back to an aware datetime; None or "" gives None."""
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

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


def parse_time(text: object) -> datetime.datetime | None:
    """Either form back to an aware datetime (UTC when it names no zone). None for None,
    "" or anything else that is no such time: a time a reader cannot read counts as
    absent (a TaskRun's status is schemaless: `controller.runtime.shapes`)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)

"""Structured logs: one JSON object per line (orjson), or plain text for humans.

Fields passed with `extra={...}` (key, result, duration, ...) become top-level JSON
fields. Every line written during a reconcile also carries the reconcile's
`controller`, `key` and `reconcile_id` (`ReconcileFields`), as every line of
controller-runtime's reconcile logger carries its reconcileID: `grep reconcile_id=...`
gives one reconcile's whole story, from the reconciler, the API client and the runtime.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

import orjson

# The fields of the reconcile running in this asyncio task (tasks it starts inherit
# them); empty outside a reconcile.
_RECONCILE: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "reconcile", default=MappingProxyType({}))


@contextmanager
def reconcile_fields(**fields: object) -> Iterator[None]:
    """Puts `fields` on every log line written inside the block (by this task)."""
    token = _RECONCILE.set(fields)
    try:
        yield
    finally:
        _RECONCILE.reset(token)


class ReconcileFields(logging.Filter):
    """Adds the running reconcile's fields to a record that does not set them itself.
    On the handler, so it sees the records of every logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        for k, v in _RECONCILE.get().items():
            if not hasattr(record, k):
                setattr(record, k, v)
        return True

# Attributes every LogRecord has; anything else came from `extra`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in vars(record).items():
            if k not in _STANDARD:
                entry[k] = v
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD)
        return f"{base} {extras}" if extras else base


def setup(level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ReconcileFields())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would print one line per scrape.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

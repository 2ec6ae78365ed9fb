"""Bounding what the controller quotes into API objects (status messages, Events)."""

from __future__ import annotations


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"

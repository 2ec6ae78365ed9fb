"""Bounding what the controller quotes into API objects (status messages, Events)."""

from __future__ import annotations

import json


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def go_quote(text: str) -> str:
    """Go's %q for the plain strings Shipwright quotes into its messages."""
    return json.dumps(text, ensure_ascii=False)

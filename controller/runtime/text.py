"""Bounding what the controller quotes into API objects (status messages, Events)."""

from __future__ import annotations

import json


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def go_quote(text: object) -> str:
    """Go's %q for the plain strings Shipwright quotes into its messages (a value read
    from a field of the wrong type quoted as its str())."""
    return json.dumps(str(text), ensure_ascii=False)

"""A container's last log lines, read once through the API server and made safe to quote.

The read is `GET pods/NAME/log?container=C&tailLines=N&limitBytes=L`: the API server asks
the node's kubelet, which starts at the N-th line from the end and stops after L bytes.
`limitBytes` counts from the start of those lines, not from the end of the log, so it is
the read's bound (READ_LIMIT), not the snippet's: the snippet's byte bound is kept here,
from the end (`bound`). Answers cut at READ_LIMIT are said to be cut (`Tail.cut`).

What a log holds is whatever the program printed: colours and cursor movement (ANSI
escapes), progress bars redrawn with carriage returns, other control characters, bytes
that are not UTF-8. `clean` keeps what a reader of the text would see, and nothing that
could move a terminal's cursor or reorder text (bidirectional overrides) when the quote is
printed by `kubectl describe`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from controller.runtime.kube import PODS, Kube

# The most bytes one read asks of the kubelet: room for the snippet's lines when they are
# long (20 lines of 3 KiB), and a bound on what a log of one enormous line can cost.
READ_LIMIT = 64 * 1024

ELLIPSIS = "…"

# ECMA-48 escapes: CSI (ESC [ ... final byte; colours, cursor moves), OSC (ESC ] ... BEL
# or ESC \\; window titles, hyperlinks), the other two-byte ESC sequences, and the 8-bit
# C1 CSI and OSC introducers.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x9d[^\x07\x1b]*(?:\x07|\x1b\\)?"
)
# What is left after the escapes that a terminal would act on, or that reorders text:
# C0 and C1 controls (a tab is kept as a space) and the bidirectional embeddings,
# overrides and isolates ("Trojan Source").
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Tail:
    """The last lines of a log, cleaned and bounded; `cut` when the read stopped at
    READ_LIMIT before the log's end (the lines are then the start of the last ones)."""

    lines: tuple[str, ...]
    cut: bool = False


async def read_tail(kube: Kube, namespace: str, pod: str, container: str, *, lines: int,
                    max_bytes: int, timeout: float) -> Tail:
    """The last `lines` lines of `container`'s log, at most `max_bytes` of them (UTF-8,
    from the end). Raises ApiError (the pod gone, RBAC, the kubelet unreachable) or
    TimeoutError after `timeout` seconds."""
    raw = await kube.read(PODS.path(namespace, pod, "log"), query={
        "container": container, "tailLines": lines, "limitBytes": READ_LIMIT},
        timeout=timeout)
    return Tail(bound(clean(raw), lines, max_bytes), cut=len(raw) >= READ_LIMIT)


def clean(raw: bytes) -> list[str]:
    """The lines of a log as a reader would see them: decoded as UTF-8 (a bad byte is
    U+FFFD), escapes and controls removed, a line redrawn with carriage returns shown as
    its last drawing, trailing blanks and empty trailing lines dropped."""
    text = _ESCAPES.sub("", raw.decode("utf-8", errors="replace"))
    lines = []
    for line in text.split("\n"):
        line = line.rstrip("\r")
        drawn = line.rsplit("\r", 1)[-1] if "\r" in line else line
        lines.append(_CONTROLS.sub("", drawn.replace("\t", " ")).rstrip())
    while lines and not lines[-1]:
        lines.pop()
    return lines


def bound(lines: list[str], max_lines: int, max_bytes: int) -> tuple[str, ...]:
    """The last of `lines` that fit in `max_lines` lines and `max_bytes` bytes (UTF-8,
    a newline between two lines counting one). When not even the last line fits whole,
    its end, marked with an ellipsis: the end of a log is what tells why it failed."""
    kept: list[str] = []
    used = 0
    for line in reversed(lines[-max_lines:] if max_lines > 0 else []):
        size = len(line.encode()) + (1 if kept else 0)
        if used + size > max_bytes:
            if not kept:
                kept.append(tail_bytes(line, max_bytes))
            break
        kept.append(line)
        used += size
    return tuple(reversed(kept))


def tail_bytes(line: str, max_bytes: int) -> str:
    """The end of `line` in at most `max_bytes` bytes of UTF-8, led by an ellipsis when
    cut (never a broken character)."""
    encoded = line.encode()
    if len(encoded) <= max_bytes:
        return line
    room = max_bytes - len(ELLIPSIS.encode())
    if room <= 0:
        return ""
    # A character cut at its start decodes to nothing with errors="ignore".
    return ELLIPSIS + encoded[-room:].decode("utf-8", errors="ignore")

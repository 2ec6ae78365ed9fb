"""What `make dev` shows: a table of BuildRuns like `kubectl get buildruns`, the
controller's own counters in one line, and what the simulated Tekton, the flaky webhook
and the samples say, each line stamped and labelled with who speaks.

Invariants: the controller's logs never go here (they go to a file, see devtools.dev.run);
on a terminal the block below the static lines is redrawn in place and nothing else
is written inside it; anywhere else the output only grows, a table row being printed
again only when its SUCCEEDED or REASON column changed.
"""

from __future__ import annotations

import datetime
import shutil
import time
from typing import TextIO

from prometheus_client import REGISTRY

from controller.runtime.kube import JSON
from controller.runtime.timestamps import parse_time
from controller.shipwright.conditions import succeeded_condition

# The label of the dev tool's own lines (the others: devtools.dev.tektonlog.TEKTON,
# devtools.dev.samples.WEBHOOK).
DEV = "[dev]"


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration: 42s, 3m12s, 25m, 5h3m, 3d."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def _since(text: str | None, now: datetime.datetime) -> str:
    t = parse_time(text)
    return human_duration((now - t).total_seconds()) if t else "<none>"


COLUMNS = ("NAME", "SUCCEEDED", "REASON", "STARTED", "COMPLETED", "AGE")


def row_of(buildrun: JSON, now: datetime.datetime) -> tuple[str, ...]:
    """One row, in COLUMNS' order; times as ages relative to `now`."""
    status = buildrun.get("status") or {}
    cond = (succeeded_condition(buildrun.get("status")) or {})
    return (
        buildrun["metadata"]["name"],
        cond.get("status") or "",
        cond.get("reason") or "",
        _since(status.get("startTime"), now),
        _since(status.get("completionTime"), now),
        _since(buildrun["metadata"].get("creationTimestamp"), now),
    )


def rows_of(buildruns: list[JSON]) -> list[tuple[str, ...]]:
    """The rows of `buildruns`, oldest first (by creation time, then name)."""
    now = datetime.datetime.now(datetime.UTC)
    return [row_of(b, now) for b in sorted(buildruns, key=_created)]


def render_table(rows: list[tuple[str, ...]]) -> list[str]:
    """The header and `rows` as lines, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    return ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [COLUMNS, *rows]]


class Screen:
    """On a terminal: one block (table + recent activity) redrawn in place.
    Otherwise (a pipe, a file, a test): append-only, like `kubectl get -w`: a row is
    printed whenever what it says changes, activity lines as they happen."""

    def __init__(self, out: TextIO, live: bool, activity_lines: int = 12) -> None:
        self.out = out
        self.live = live
        self.activity: list[str] = []
        self.activity_lines = activity_lines
        self._drawn = 0
        self._last: dict[str, tuple[str, ...]] = {}
        self._header_printed = False
        self._last_summary = ""

    def say(self, line: str) -> None:
        """An activity line, stamped with the time: in the live block's last
        `activity_lines`, or appended at once."""
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        self.activity.append(stamped)
        del self.activity[: -self.activity_lines]
        if not self.live:
            self.out.write(stamped + "\n")
            self.out.flush()

    def print(self, text: str = "") -> None:
        """Static lines above the live block."""
        self._erase()
        self.out.write(text + "\n")
        self.out.flush()

    def _erase(self) -> None:
        if self.live and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def update(self, buildruns: list[JSON]) -> None:
        """Shows the BuildRuns as they are now (and the metrics line, if it changed)."""
        rows = rows_of(buildruns)
        if self.live:
            self._draw(rows)
            return
        summary = metrics_summary()
        if summary != self._last_summary:
            self._last_summary = summary
            self.say(summary)
        # Append-only: the header once, then each row whose status columns changed
        # (ages tick every second, so they are not compared).
        changed = [r for r in rows if self._last.get(r[0], ())[:3] != r[:3]]
        for r in rows:
            self._last[r[0]] = r
        if not changed:
            return
        lines = render_table(changed if self._header_printed else rows)
        if self._header_printed:
            lines = lines[1:]
        self._header_printed = True
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()

    def _draw(self, rows: list[tuple[str, ...]]) -> None:
        width = max(shutil.get_terminal_size().columns - 1, 20)
        lines = render_table(rows) + ["", metrics_summary(), "", "recent activity:"] + [
            f"  {a}" for a in self.activity
        ]
        self._erase()
        self.out.write("".join(line[:width] + "\n" for line in lines))
        self.out.flush()
        self._drawn = len(lines)

    def final(self, buildruns: list[JSON]) -> None:
        """The last table, printed in full in either mode."""
        if self.live:
            self._draw(rows_of(buildruns))
            self._drawn = 0
            return
        self.out.write("\n" + "\n".join(render_table(rows_of(buildruns))) + "\n")
        self.out.flush()


def metrics_summary() -> str:
    """A one-line digest of the controller's own counters (the same process's registry)."""
    totals: dict[str, dict[str, float]] = {"retries": {}, "completed": {}, "reconciles": {}}
    wanted = {
        "buildrun_retries_total": ("retries", "error_class"),
        "buildrun_completed_total": ("completed", "reason"),
        "controller_runtime_reconcile_total": ("reconciles", "result"),
    }
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name in wanted:
                key, label = wanted[sample.name]
                value = sample.labels.get(label, "")
                totals[key][value] = totals[key].get(value, 0.0) + sample.value

    def part(key: str) -> str:
        items = sorted(totals[key].items())
        return " ".join(f"{k}={v:g}" for k, v in items if v) or "none"

    return (f"metrics: reconciles {part('reconciles')} | retries by error_class "
            f"{part('retries')} | completed {part('completed')}")


def _created(buildrun: JSON) -> tuple[str, str]:
    meta = buildrun["metadata"]
    return (meta.get("creationTimestamp") or "", meta["name"])

"""What the soaks' command lines share: their progress lines on stderr, and the lines a
recorded run starts with (RELIABILITY.md quotes them)."""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable


def progress_on_stderr(name: str) -> Callable[[str], None]:
    """A soak's progress lines, each on stderr as it comes, prefixed with `name`."""
    def write(line: str) -> None:
        print(f"{name}: {line}", file=sys.stderr, flush=True)
    return write


def print_run_header(module: str, argv: list[str] | None, started: str) -> None:
    """The command as typed (`python -m module` and its arguments), and when and where it
    started."""
    print(f"command: {' '.join([f'python -m {module}', *(argv or sys.argv[1:])])}")
    print(f"started: {started} on {platform.node()} ({platform.machine()})")

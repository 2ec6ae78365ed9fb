"""Child processes that never outlive the dev tool, test or benchmark that started them,
and finding processes by their command line."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn`: the kernel sends the child SIGKILL when its parent dies, however
    hard (PR_SET_PDEATHSIG), so a killed test run leaves no servers behind."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def dies_with_parent(sig: int) -> Callable[[], None]:
    """A `preexec_fn` as die_with_parent but with signal `sig`, for a child that must
    clean up after itself when its parent dies (SIGTERM: devtools.node.nodens)."""
    def preexec() -> None:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    return preexec


def command_lines() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every live process but this one that can be read (a process
    that ends while it is read is left out)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(entry.name), argv

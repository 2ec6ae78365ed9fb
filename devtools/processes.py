"""Child processes that never outlive the dev tool, test or benchmark that started them."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A `preexec_fn`: the kernel sends the child SIGKILL when its parent dies, however
    hard (PR_SET_PDEATHSIG), so a killed test run leaves no servers behind."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

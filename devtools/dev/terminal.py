"""`make dev`'s keyboard: on a terminal, Ctrl-C (or q) is a key this process reads, not
a SIGINT the terminal sends to every process in its foreground group.

Invariants: the terminal's settings are changed only while `keys_not_signals` is
entered, and put back on the way out, or by `restore_terminal()` just before a forced
exit; off a terminal (a pipe, a test) nothing is changed and no key is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
from collections.abc import Callable, Iterator

# What puts each terminal changed by an entered `keys_not_signals` back as it was.
_restore_terminal: list[Callable[[], None]] = []


def restore_terminal() -> None:
    """Puts every terminal changed by `keys_not_signals` back; for a forced exit
    (os._exit skips the context manager's way out)."""
    for restore in _restore_terminal:
        restore()


@contextlib.contextmanager
def keys_not_signals(on_stop: Callable[[], None]) -> Iterator[None]:
    """On a terminal, Ctrl-C is read as a key instead of raising SIGINT.

    The terminal sends SIGINT to the whole foreground process group, which
    includes etcd and kube-apiserver: they would die before the controller had
    drained. With ISIG (and echo) off, Ctrl-C (or q) arrives on stdin, and only
    this process decides the order things stop in. The terminal is restored on exit.
    Must be entered inside a running event loop, which reads the keys.
    """
    fd = sys.stdin.fileno() if sys.stdin is not None else -1
    if fd < 0 or not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    changed = termios.tcgetattr(fd)
    changed[3] &= ~(termios.ISIG | termios.ICANON | termios.ECHO)
    termios.tcsetattr(fd, termios.TCSADRAIN, changed)
    _restore_terminal.append(lambda: termios.tcsetattr(fd, termios.TCSADRAIN, saved))
    loop = asyncio.get_running_loop()

    def on_key() -> None:
        data = os.read(fd, 64)
        if not data or b"\x03" in data or b"q" in data or b"\x04" in data:
            on_stop()

    loop.add_reader(fd, on_key)
    try:
        yield
    finally:
        loop.remove_reader(fd)
        _restore_terminal.pop()()

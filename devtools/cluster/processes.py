"""Child processes that never outlive the dev tool, test or benchmark that started them:
the one helper every owner of children uses to start one with its log, ask whether it
still runs and stop it; and finding processes by their command line.

Its users: LocalCluster (etcd, kube-apiserver), TektonStack (kube-scheduler, kwok,
kube-controller-manager, and through TektonPipelines Tekton's webhook and controller),
RealNode (the registry, the Git server and the node's supervisor), that supervisor
(devtools.node.nodens: containerd and the kubelet, inside the node's mount namespace)
and Shipwright's own controller. What differs between them is a parameter, never a
copy: the signal a child gets when its parent dies (`death_signal`: SIGKILL, or SIGTERM
for the node's supervisor, which must clean up after itself), how long it may take to
stop (`grace`), and what an owner raises when a child cannot start or has died (its
Children's `error`: StackError, NodeError). Waiting until a child serves is
devtools.cluster.polling.wait_until with the owner's `check_alive` as its `alive`: a
child that dies ends the wait at once, not at the timeout. The node's supervisor, which
has no event loop, waits for its children's ready files in its own loop.

Only the standard library is imported here: the node's supervisor imports this module
in the node's namespace, where aiohttp and the controller's client (0.6-1 s) would only
delay the node.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

_PR_SET_PDEATHSIG = 1
# How much of a dead child's log its error shows.
LOG_TAIL = 3000


def dies_with_parent(sig: int) -> Callable[[], None]:
    """A `preexec_fn`: the kernel sends the child `sig` when its parent dies, however hard
    (PR_SET_PDEATHSIG), so a killed test run leaves no servers behind. SIGKILL for most;
    SIGTERM for a child that must clean up after itself (devtools.node.nodens)."""
    def preexec() -> None:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    return preexec


# The `preexec_fn` of almost every child: SIGKILL when its parent dies.
die_with_parent = dies_with_parent(signal.SIGKILL)


def base_env(**extra: str) -> dict[str, str]:
    """A small, explicit environment: a child never picks up the caller's KUBECONFIG."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TZ") if k in os.environ}
    env.update(extra)
    return env


class ChildExited(RuntimeError):
    """A child that should be running has exited: its name, exit code and log's tail."""


class Child:
    """One child process, its output (stdout and stderr) appended to its log file.

    Invariants: at most one process runs per Child; start() after stop(), or after the
    process exited, starts a new one with the same argv, environment and log. `pid` is
    the running (or exited but not yet stopped) process's, None before start() and after
    stop(); `returncode` is how the last stopped process ended (negative: the signal),
    None until one was stopped. Every process gets `death_signal` when this one dies.
    """

    def __init__(self, name: str, argv: list[str], log: Path,
                 env: Mapping[str, str] | None = None, *, death_signal: int = signal.SIGKILL,
                 grace: float = 10.0) -> None:
        """`env` None inherits ours; `grace` is how long stop() waits after its signal
        before it sends SIGKILL."""
        self.name = name
        self.argv = argv
        self.log = log
        self.env = dict(env) if env is not None else None
        self.death_signal = death_signal
        self.grace = grace
        self.returncode: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Starts the process; OSError if its program cannot be run."""
        with self.log.open("ab") as log:  # the child has its own copy of the descriptor
            self._popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, preexec_fn=dies_with_parent(self.death_signal))

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def exit_code(self) -> int | None:
        """The process's exit code if it has exited (and was not stopped since), else None."""
        return self._popen.poll() if self._popen is not None else None

    def check_alive(self) -> None:
        """Raises ChildExited, with the tail of the log, if the process has exited."""
        code = self.exit_code()
        if code is not None:
            tail = self.log.read_text(errors="replace")[-LOG_TAIL:]
            raise ChildExited(f"{self.name} exited with {code}:\n{tail}")

    def stop(self, sig: int = signal.SIGTERM, grace: float | None = None) -> bool:
        """Sends `sig` and waits `grace` seconds (this Child's own by default), then
        SIGKILL; does nothing to a process that has exited. True if it had to SIGKILL."""
        popen, self._popen = self._popen, None
        if popen is None:
            return False
        killed = False
        if popen.poll() is None:
            popen.send_signal(sig)
            try:
                popen.wait(self.grace if grace is None else grace)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
                killed = True
        self.returncode = popen.returncode
        return killed


class Children:
    """The children one owner started, each with its log `folder/<name>.log`.

    Invariants: stop_all() stops them in reverse start order, so a child stops before
    those it may depend on (the kube-controller-manager before kwok before the
    scheduler); a child stopped alone (stop()) is forgotten, and started again it is
    added at the end. Every failure is the owner's `error` with one message: a child
    that cannot start, or has died (with its log's tail).
    """

    def __init__(self, folder: Path, *, error: type[Exception] = ChildExited,
                 grace: float = 10.0) -> None:
        """`grace`: each child's unless spawn() says otherwise."""
        self.folder = folder
        self.error = error
        self.grace = grace
        self._started: list[Child] = []

    def spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None, *,
              log: Path | None = None, death_signal: int = signal.SIGKILL,
              grace: float | None = None) -> Child:
        """A started Child (see Child for the parameters)."""
        child = Child(name, argv, log or self.folder / f"{name}.log", env,
                      death_signal=death_signal, grace=self.grace if grace is None else grace)
        try:
            child.start()
        except OSError as exc:
            raise self.error(f"{name}: cannot start {argv[0]}: {exc}") from None
        self._started.append(child)
        return child

    def check_alive(self) -> None:
        """The owner's error for the first child, in start order, that has exited."""
        try:
            for child in self._started:
                child.check_alive()
        except ChildExited as exc:
            raise self.error(str(exc)) from None

    def stop(self, child: Child, sig: int = signal.SIGTERM, grace: float | None = None) -> None:
        child.stop(sig, grace)
        self._started.remove(child)

    def stop_all(self, grace: float | None = None) -> None:
        """SIGTERM to each, newest first, SIGKILL after `grace` (each child's own if None)."""
        for child in reversed(self._started):
            child.stop(grace=grace)
        self._started.clear()

    def pids(self) -> dict[str, int]:
        """Each started child's process id by name."""
        return {c.name: c.pid for c in self._started if c.pid is not None}


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

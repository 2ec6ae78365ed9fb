"""The real node's private mount namespace and the supervisor of what runs in it.

containerd and the kubelet write outside the folders they are given: the kubelet its
device-plugin socket in /var/lib/kubelet/device-plugins and container log links in
/var/log/containers (both hard-coded), containerd-shim its sockets in /run/containerd/s;
the kubelet also sets six kernel tunables (vm.overcommit_memory, kernel.panic, ...)
when they differ from what it wants, makes its root folder a shared bind mount, and
makes a cgroup tree. `python -m devtools.cluster.nodens SPEC.json`, started by
devtools.cluster.realnode under `unshare --mount --propagation private`, keeps all of
that to the stack:

- /var/lib, /var/log and /run become overlays whose upper folders are in the stack's
  folder: what the node writes there lands in the stack's folder, the host's files stay
  as they are, and a second stack's node has its own;
- each tunable the kubelet would change is shown to it, in this namespace only, as the
  value it wants (a file bind-mounted over /proc/sys/...), so it changes nothing;
- the cgroup root `spec["cgroup_root"]` is made in every cgroup hierarchy, and removed
  (with all the kubelet made under it) when everything has stopped;
- it is the children's subreaper (PR_SET_CHILD_SUBREAPER): containerd-shim, which
  leaves containerd to run on its own, and the containers it starts are reparented
  here, so stopping reaches them all.

It starts the children of `spec["children"]` in order, each after the previous one's
`wait_for` path exists, and supervises them. SIGTERM (which devtools.cluster.realnode
sends, and the kernel sends when that parent dies: PR_SET_PDEATHSIG) stops them in
reverse order (SIGTERM, SIGKILL after `grace` seconds), then SIGKILLs every process left
under it until none is, removes the cgroups, and exits; the mounts end with the
namespace. A child that exits by itself ends it the same way, with exit code 1.

One child can be restarted while the rest run on, as a node's service manager restarts
containerd or the kubelet (devtools.cluster.realnode.RealNode.restart): a file
`restart-<name>` in `spec["control"]` holding a signal's name (SIGTERM, as `systemctl
restart` sends; SIGKILL, a crash). The supervisor takes the file away, sends that signal
to the child alone (SIGKILL after `grace` seconds), removes the child's `wait_for` path
(containerd leaves its socket behind when killed), starts it again with the same argv and
waits for `wait_for`, then writes `restarted-<name>` (JSON, written whole: a Restart).
Only the child is signalled: containerd-shim and the containers it runs are children of
this supervisor, not of containerd, so they run on, as with containerd's own
`KillMode=process`; a new containerd finds them through its state folder and the new
kubelet its pods through containerd. The file counts the shims alive before the signal,
those of them still alive once the new child is ready, and all alive then, so a caller can
see they were kept (pods that start or end meanwhile move the two counts apart).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devtools.cluster.processes import die_with_parent

_PR_SET_CHILD_SUBREAPER = 36
CGROUP_FS = Path("/sys/fs/cgroup")
# What the kubelet sets (k8s.io/kubernetes pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables; v1.34): /proc/sys path -> the value it wants.
KUBELET_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}


def log(message: str) -> None:
    print(f"nodens: {message}", file=sys.stderr, flush=True)


def run(*argv: str) -> None:
    subprocess.run(argv, check=True)


def overlay(target: str, state: Path) -> None:
    """`target` as an overlay of itself, its writes kept in `state`/<name>."""
    name = target.strip("/").replace("/", "-")
    upper, work = state / f"{name}-upper", state / f"{name}-work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    run("mount", "-t", "overlay", "overlay", "-o",
        f"lowerdir={target},upperdir={upper},workdir={work}", target)


def mask_tunables(state: Path) -> list[str]:
    """Bind-mounts the kubelet's wanted value over each tunable that differs."""
    masked = []
    folder = state / "sysctl"
    folder.mkdir(parents=True, exist_ok=True)
    for path, wanted in KUBELET_TUNABLES.items():
        proc = Path("/proc/sys") / path
        if int(proc.read_text().split()[0]) == wanted:
            continue
        shown = folder / path.replace("/", ".")
        shown.write_text(f"{wanted}\n")
        run("mount", "--bind", str(shown), str(proc))
        masked.append(path)
    return masked


def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, name=systemd, the v2 one)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(fields[4]))
    return found


def make_cgroups(root: str) -> None:
    for h in hierarchies():
        (h / root).mkdir(exist_ok=True)


def remove_cgroups(root: str) -> list[str]:
    """rmdir of `root` and everything under it, deepest first, in every hierarchy;
    what could not be removed (a process still in it)."""
    left = []
    for h in hierarchies():
        top = h / root
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, top]:
            try:
                d.rmdir()
            except OSError as exc:
                left.append(f"{d}: {exc.strerror}")
    return left


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def kill_all_children(timeout: float = 30.0) -> None:
    """SIGKILL every child until none is left: shims and containers reparented here."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline:
        reap()
        pids = children_of(me)
        if not pids:
            quiet += 1
            if quiet >= 3:  # nothing was reparented here meanwhile
                return
        else:
            quiet = 0
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    log(f"processes still here after {timeout:.0f}s: {children_of(me)}")


RESTART = "restart-"
RESTARTED = "restarted-"


@dataclass(frozen=True)
class Restart:
    """What one restart of a child did (the `restarted-<name>` file). Times are wall-clock
    seconds (time.time()), so a caller compares them with the API server's timestamps."""

    name: str
    signal: str
    old_pid: int
    exit_code: int  # the old process's (negative: the signal that ended it)
    new_pid: int
    signalled_at: float
    started_at: float
    ready_at: float  # its wait_for path made (started_at where it has none)
    shims_before: int  # processes under the supervisor but not its children, at the signal
    shims_kept: int  # ... of those, alive once the new child was ready
    shims_after: int  # all of them alive then

    @classmethod
    def read(cls, path: Path) -> Restart:
        return cls(**json.loads(path.read_text()))


class Supervisor:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.stopping = False
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def on_term(self, *_: object) -> None:
        self.stopping = True

    def start_children(self) -> None:
        for child in self.spec["children"]:
            self.children.append((child["name"], self._start(child)))

    def _start(self, child: dict[str, Any]) -> subprocess.Popen[bytes]:
        """Starts `child` and waits for its `wait_for` path."""
        log_file = open(child["log"], "ab")  # noqa: SIM115 - the child keeps it
        popen = subprocess.Popen(child["argv"], stdout=log_file, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=child.get("env"),
                                 preexec_fn=die_with_parent)
        log_file.close()
        log(f"started {child['name']} (pid {popen.pid})")
        wait_for = child.get("wait_for")
        deadline = time.monotonic() + float(child.get("wait_seconds", 60))
        while wait_for and not Path(wait_for).exists():
            if self.stopping or popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{child['name']} did not make {wait_for}")
            time.sleep(0.05)
        return popen

    def _end(self, name: str, popen: subprocess.Popen[bytes], sig: int) -> None:
        """Sends `sig` to one child and waits for it; SIGKILL after the grace."""
        grace = float(self.spec.get("grace", 5))
        if popen.poll() is None:
            popen.send_signal(sig)
            try:
                popen.wait(grace)
            except subprocess.TimeoutExpired:
                log(f"{name} outlived {signal.Signals(sig).name} by {grace:.0f}s: SIGKILL")
                popen.kill()
                popen.wait()

    def shims(self) -> set[int]:
        """Processes reparented here (containerd-shim; the containers are its children)."""
        mine = {popen.pid for _, popen in self.children}
        return {pid for pid in children_of(os.getpid()) if pid not in mine}

    def restart(self, name: str, sig: int) -> Restart:
        """Ends child `name` with `sig` and starts it again (the module's doc)."""
        indexes = [i for i, (n, _) in enumerate(self.children) if n == name]
        if not indexes:
            raise RuntimeError(f"no child named {name!r} to restart")
        index = indexes[0]
        child = self.spec["children"][index]
        popen = self.children[index][1]
        before = self.shims()
        signalled_at = time.time()
        self._end(name, popen, sig)
        log(f"{name} (pid {popen.pid}) ended by {signal.Signals(sig).name}: exit code "
            f"{popen.returncode}; starting it again")
        if child.get("wait_for"):
            Path(child["wait_for"]).unlink(missing_ok=True)
        started_at = time.time()
        new = self._start(child)
        self.children[index] = (name, new)
        after = self.shims()
        return Restart(name, signal.Signals(sig).name, popen.pid, popen.returncode, new.pid,
                       signalled_at, started_at, time.time(), len(before), len(before & after),
                       len(after))

    def serve_restarts(self) -> None:
        """Carries out each `restart-<name>` request in spec["control"] (module doc)."""
        control = self.spec.get("control")
        if not control:
            return
        for request in sorted(Path(control).glob(RESTART + "*")):
            name = request.name.removeprefix(RESTART)
            sig = signal.Signals[request.read_text().strip() or "SIGTERM"]
            request.unlink()
            done = self.restart(name, sig)
            answer = Path(control) / (RESTARTED + name)
            partial = answer.with_suffix(".partial")
            partial.write_text(json.dumps(asdict(done)))
            partial.rename(answer)

    def watch(self) -> int:
        while not self.stopping:
            self.serve_restarts()
            for name, popen in self.children:
                if popen.poll() is not None:
                    log(f"{name} exited with {popen.returncode}")
                    return 1
            time.sleep(0.2)
        return 0

    def stop(self) -> None:
        for name, popen in reversed(self.children):
            self._end(name, popen, signal.SIGTERM)
        kill_all_children()


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    state = Path(spec["state"])
    sup = Supervisor(spec)
    signal.signal(signal.SIGTERM, sup.on_term)
    signal.signal(signal.SIGINT, sup.on_term)
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)
    code = 1
    try:
        for target in spec["overlays"]:
            overlay(target, state)
        masked = mask_tunables(state)
        if masked:
            log("kernel tunables shown to the kubelet as it wants them: " + ", ".join(masked))
        make_cgroups(spec["cgroup_root"])
        sup.start_children()
        Path(spec["ready"]).write_text(str(os.getpid()))
        code = sup.watch()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        log(f"ERROR: {exc}")
    finally:
        sup.stop()
        left = remove_cgroups(spec["cgroup_root"])
        if left:
            log("cgroups left: " + "; ".join(left))
            code = code or 1
    log(f"stopped (exit code {code})")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

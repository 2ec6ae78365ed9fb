"""What hack/ builds outside Python, as the dev tools ask for it: where the repo and hack/
are, `build(component)` and `script_output(...)`, and StackError, the one line that names a
component that cannot be had or did not start.

A module of its own, importing nothing of the cluster, because the oracle, Shipwright's
source and the CRD generator ask hack/ for what they need and start no cluster.

Invariants:
  * a script of hack/ prints what it made (a folder, one a line) last on its stdout; its
    progress and errors go to our stderr as they come, so a first build's minutes are
    not mistaken for a hang;
  * a script that is missing, fails or prints nothing is a StackError naming the
    component and the command, never a traceback;
  * a cached build answers in well under a second, so callers ask again rather than
    keep what a build printed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HACK = REPO / "hack"


class StackError(RuntimeError):
    """One line naming the component that is missing, failed to build or did not start."""

    @classmethod
    def timed_out(cls, component: str, what: str, timeout: float, log: Path) -> StackError:
        """The stack waited `timeout` seconds for `component` to do `what`, in vain."""
        return cls(f"{component}: timed out after {timeout:.0f}s waiting {what} (log: {log})")


def script_output(component: str, script: str, *args: str) -> list[str]:
    """The lines hack/<component>/<script> printed on stdout; StackError naming the
    component when the script is missing, fails or prints nothing."""
    path = HACK / component / script
    if not path.exists():
        raise StackError(f"{component}: no {script} script at {path}")
    proc = subprocess.run([str(path), *args], stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        command = " ".join([f"hack/{component}/{script}", *args])
        raise StackError(
            f"{component}: {command} failed with exit code {proc.returncode} "
            "(its stderr says why)"
        )
    return lines


def build(component: str, *args: str) -> Path:
    """The folder hack/<component>/build prints last: cached builds answer in well under a
    second, a first build takes minutes. Raises StackError naming the component."""
    return Path(script_output(component, "build", *args)[-1])


def need(component: str, path: Path) -> Path:
    """`path`, a file a build made; StackError naming the component if it is missing."""
    if not path.exists():
        raise StackError(f"{component}: {path} missing (run hack/build-all)")
    return path

"""devtools.cluster.nodens' restart of one child, on plain processes: the request file in,
the child alone ended and started again (its wait_for path made anew), the answer out."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.cluster.nodens import RESTART, RESTARTED, Restart, Supervisor


def child(tmp_path: Path, name: str, *, ready: bool) -> dict[str, Any]:
    """A child that makes its ready file (when `ready`) and sleeps; SIGTERM ends it."""
    made = tmp_path / f"{name}.ready"
    script = (f"touch {made}; " if ready else "") + "exec sleep 600"
    out: dict[str, Any] = {"name": name, "log": str(tmp_path / f"{name}.log"),
                           "argv": ["sh", "-c", script]}
    if ready:
        out["wait_for"] = str(made)
    return out


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    control = tmp_path / "control"
    control.mkdir()
    sup = Supervisor({"control": str(control), "grace": 2,
                      "children": [child(tmp_path, "first", ready=True),
                                   child(tmp_path, "second", ready=False)]})
    sup.start_children()
    yield sup
    # Not sup.stop(): it SIGKILLs every child of this process, pytest's others included.
    for name, popen in sup.children:
        sup._end(name, popen, signal.SIGKILL)


def test_a_restart_request_restarts_that_child_alone_and_answers(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    (first_pid, second_pid) = [p.pid for _, p in supervisor.children]
    (control / f"{RESTART}first").write_text("SIGTERM\n")
    supervisor.serve_restarts()

    assert not (control / f"{RESTART}first").exists()
    done = Restart.read(control / f"{RESTARTED}first")
    assert (done.name, done.signal, done.old_pid) == ("first", "SIGTERM", first_pid)
    assert done.exit_code == -signal.SIGTERM
    assert done.new_pid != first_pid
    assert done.signalled_at <= done.started_at <= done.ready_at
    (new, other) = [p for _, p in supervisor.children]
    assert new.pid == done.new_pid and new.poll() is None
    assert other.pid == second_pid and other.poll() is None
    assert (tmp_path / "first.ready").exists()  # removed, then made by the new process
    assert json.loads((control / f"{RESTARTED}first").read_text())["new_pid"] == new.pid


def test_sigkill_is_a_crash_and_nothing_is_done_without_a_request(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    control = tmp_path / "control"
    before = [p.pid for _, p in supervisor.children]
    supervisor.serve_restarts()
    assert [p.pid for _, p in supervisor.children] == before
    (control / f"{RESTART}second").write_text("SIGKILL")
    supervisor.serve_restarts()
    done = Restart.read(control / f"{RESTARTED}second")
    assert (done.signal, done.exit_code) == ("SIGKILL", -signal.SIGKILL)
    assert done.ready_at >= done.started_at  # no wait_for: ready once started


def test_a_request_for_no_such_child_is_an_error(supervisor: Supervisor, tmp_path: Path) -> None:
    (tmp_path / "control" / f"{RESTART}nobody").write_text("SIGTERM")
    with pytest.raises(RuntimeError, match="no child named 'nobody'"):
        supervisor.serve_restarts()

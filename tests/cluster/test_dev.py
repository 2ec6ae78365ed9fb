"""`make dev` end to end: `python -m devtools.dev.run` in a subprocess.

Each test starts its own whole stack (as `make dev` does), so these run the whole
thing: controller, real Tekton with kwok pods, flaky webhook and the samples, and on a
machine that holds a real node, one sample really built there.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools.cluster.processes import command_lines
from devtools.dev.samples import REAL_BUILD, SAMPLES
from devtools.node.realbuilds import BUILD_LINE, GREETING
from devtools.node.realnode import unavailable

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "devtools.dev.run", "--metrics-address", "127.0.0.1:0"]
ROW = re.compile(r"^(\S+)\s+(True|False|Unknown)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (our servers name their folder)."""
    lines = (b" ".join(argv).decode(errors="replace") for _, argv in command_lines())
    return [line for line in lines if text in line]


def final_rows(output: str) -> dict[str, tuple[str, str]]:
    """NAME -> (SUCCEEDED, REASON) from the last table printed."""
    lines = output.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("NAME ") and
                "SUCCEEDED" in line)
    rows: dict[str, tuple[str, str]] = {}
    for line in lines[start + 1:]:
        match = ROW.match(line)
        if not match:
            break
        rows[match[1]] = (match[2], match[3])
    return rows


def test_dev_once_runs_every_sample_to_its_expected_outcome(tmp_path: Path) -> None:
    workdir = tmp_path / "dev"
    proc = subprocess.run(
        [*COMMAND, "--once", "--workdir", str(workdir)],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, out

    assert re.search(r"metrics: http://127\.0\.0\.1:\d+/metrics", out), out
    # Real Tekton moved the TaskRuns along, and each change was told.
    assert "[tekton-simulator]" not in out, out
    tekton = [line for line in out.splitlines() if "[tekton] TaskRun" in line]
    assert any(": Running (Unknown), pod " in line for line in tekton), out
    assert any("(BuildRun hello): Succeeded (True)" in line for line in tekton), out
    assert any("(BuildRun cancel-me): TaskRunCancelled (False)" in line for line in tekton), out
    # The webhook timed out the first two creates, the controller retried, then it passed.
    assert "[flaky-webhook] TaskRun create #1: timing out" in out
    assert "[flaky-webhook] TaskRun create #2: timing out" in out
    assert "[flaky-webhook] TaskRun create #3: allowed" in out
    assert re.search(r"retries by error_class \S*webhook=[1-9]", out), out

    rows = final_rows(out)
    real = rows.pop(REAL_BUILD.name, None)
    assert rows == {
        "flaky-webhook": ("True", "Succeeded"),
        "hello": ("True", "Succeeded"),
        "missing-build": ("False", "BuildNotFound"),
        "cancel-me": ("False", "BuildRunCanceled"),
    }, out
    assert {s.name: s.expect for s in SAMPLES} == {k: v[1] for k, v in rows.items()}
    # Where the machine holds a real node, one sample is really built and its log shown.
    if unavailable() is None:
        assert re.search(r"\[dev\] real node localhost up in [\d.]+s", out), out
        assert real == ("True", "Succeeded"), out
        assert f"[build] build: {BUILD_LINE}" in out, out
        assert f"[build] build: {GREETING}" in out, out
        assert re.search(r"\[build\] image-processing: .* pushed", out), out
        assert "[dev] all 5 sample BuildRuns ended as expected" in out
    else:
        assert f"[dev] no real build here: {unavailable()}" in out, out
        assert "[dev] all 4 sample BuildRuns ended as expected" in out
    assert "controller stopped with exit code 0" in out
    # Controller logs went to the file, not over the table.
    assert (workdir / "controller.log").read_text().strip()
    assert not processes_mentioning(str(workdir)), "etcd or kube-apiserver left running"


def _read_until(fd: int, pattern: str, timeout: float, sofar: bytearray) -> None:
    deadline = time.monotonic() + timeout
    while pattern.encode() not in sofar:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{pattern!r} not seen; output so far:\n"
                               f"{sofar.decode(errors='replace')}")
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk:
                raise EOFError(sofar.decode(errors="replace"))
            sofar.extend(chunk)


def test_ctrl_c_on_a_terminal_drains_the_controller_and_stops_the_servers(
    tmp_path: Path,
) -> None:
    """The interactive path: a real pseudo-terminal, the live table, and Ctrl-C typed
    as a key. The servers must not get the terminal's SIGINT before the controller
    has drained (they share its process group), and nothing may be left running."""
    workdir = tmp_path / "dev"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*COMMAND, "--workdir", str(workdir)], cwd=REPO,
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        env={**os.environ, "COLUMNS": "160", "LINES": "50"},
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, "Ctrl-C stops everything", 120, seen)
        # The live table (redrawn in place) shows the cancelled sample finishing.
        _read_until(master, "BuildRunCanceled", 90, seen)
        os.write(master, b"\x03")
        _read_until(master, "[dev] done (exit code", 60, seen)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = seen.decode(errors="replace")
    assert code == 0, text
    assert "\x1b[" in text, "the table was not redrawn in place"
    assert "stopping (Ctrl-C again to force)" in text
    assert "controller stopped with exit code 0" in text
    assert "could not remove the webhook" not in text, text
    assert "Traceback" not in text, text
    assert not processes_mentioning(str(workdir)), "etcd or kube-apiserver left running"


def test_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    """What `kill` (or a CI timeout) sends: the same orderly stop as Ctrl-C."""
    workdir = tmp_path / "dev"
    proc = subprocess.Popen(
        [*COMMAND, "--workdir", str(workdir)], cwd=REPO, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    seen = bytearray()
    try:
        _read_until(proc.stdout.fileno(), "[tekton] TaskRun", 120, seen)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = (seen + rest).decode(errors="replace")
    assert proc.returncode == 0, text
    assert "controller stopped with exit code 0" in text
    assert "Traceback" not in text, text
    assert not processes_mentioning(str(workdir))

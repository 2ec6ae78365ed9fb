"""free_port across processes: a port another living process has claimed is not handed
out, and its claim goes with that process (devtools.cluster.localcluster.claim_port)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from devtools.cluster import localcluster
from devtools.cluster.localcluster import claim_port, free_port
from devtools.hack import REPO

# A child process that claims one port, says whether it got it, and holds it until its
# stdin closes.
HOLDER = ("import sys\nfrom devtools.cluster.localcluster import claim_port\n"
          "print(claim_port(int(sys.argv[1])), flush=True)\nsys.stdin.read()\n")


def holding(port: int) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(port)], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "True"
    return child


def release(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    assert child.wait(timeout=30) == 0


def outside_free_ports() -> int:
    # Below FREE_PORTS: no free_port of this session (or another) has handed it out.
    return random.randrange(14000, localcluster.FREE_PORTS.start - 1)


def test_a_port_another_process_holds_is_not_claimed_until_that_process_exits() -> None:
    port = outside_free_ports()
    child = holding(port)
    try:
        assert not claim_port(port)
    finally:
        release(child)
    assert claim_port(port)  # the kernel dropped the claim with its process


def test_free_port_skips_a_port_another_process_claimed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    port = outside_free_ports()
    # Nearly every pick is the claimed port: without the claim, free_port would hand it
    # out (it is bindable: the child claims it and binds nothing).
    monkeypatch.setattr(localcluster, "FREE_PORTS", [port] * 50 + [port + 1])
    child = holding(port)
    try:
        assert free_port() == port + 1
    finally:
        release(child)

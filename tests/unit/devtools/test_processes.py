"""devtools.cluster.processes, on plain shell processes: a child's death is one error
with its log, stop() ends what ignores SIGTERM, Children stop newest first; and
polling.wait_until ends at once when `alive` raises."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.cluster.polling import wait_until
from devtools.cluster.processes import Child, ChildExited, Children


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    group = Children(tmp_path)
    yield group
    group.stop_all(grace=0.1)


def test_a_child_that_exits_is_an_error_with_its_log(children: Children) -> None:
    child = children.spawn("talker", ["sh", "-c", "echo last words; exit 3"])
    deadline = time.monotonic() + 10
    while child.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.exit_code() == 3
    with pytest.raises(ChildExited, match=r"^talker exited with 3:\nlast words\n$"):
        children.check_alive()


def test_stop_kills_what_outlives_its_grace_and_keeps_how_it_ended(tmp_path: Path) -> None:
    # An ignored signal stays ignored across exec; `ready` says so before we signal.
    ready = tmp_path / "ready"
    stubborn = Child("stubborn", ["sh", "-c", f"trap '' TERM; touch {ready}; exec sleep 60"],
                     tmp_path / "stubborn.log", grace=0.2)
    stubborn.start()
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stubborn.stop() is True
    assert stubborn.returncode == -signal.SIGKILL and stubborn.pid is None
    polite = Child("polite", ["sleep", "60"], tmp_path / "polite.log")
    polite.start()
    assert polite.stop() is False and polite.returncode == -signal.SIGTERM
    assert polite.stop() is False  # stopping a stopped child does nothing
    polite.start()  # and it can start again
    assert polite.running()
    polite.stop(signal.SIGKILL)


def test_children_stop_newest_first_and_one_alone_is_forgotten(
        children: Children, tmp_path: Path) -> None:
    # Each writes its name to `order` when SIGTERMed (and ends its sleep).
    order = tmp_path / "order"
    script = "trap 'echo {0} >> {1}; kill $!; exit 0' TERM; touch {2}; sleep 60 & wait"
    started = [children.spawn(name, ["sh", "-c", script.format(name, order, tmp_path / name)])
               for name in ("first", "second", "third")]
    deadline = time.monotonic() + 10
    while not all((tmp_path / c.name).exists() for c in started) and time.monotonic() < deadline:
        time.sleep(0.01)
    children.stop(started[1])
    assert set(children.pids()) == {"first", "third"}
    children.stop_all()
    assert order.read_text().split() == ["second", "third", "first"]
    assert children.pids() == {}


async def test_wait_until_ends_at_once_when_alive_raises(tmp_path: Path) -> None:
    calls = 0

    def dead() -> None:
        raise ChildExited("gone")

    def never() -> bool:
        nonlocal calls
        calls += 1
        return False

    t0 = asyncio.get_running_loop().time()
    with pytest.raises(ChildExited):
        await wait_until(never, 30, 0.05, alive=dead)
    assert calls == 0 and asyncio.get_running_loop().time() - t0 < 1
    assert await wait_until(lambda: "yes", 1, alive=lambda: None) == "yes"

"""controller/commands/runner.py: each way a command fails is one line on stderr and its
exit code, and the connection is closed whatever the body did. A kubeconfig pointing at
a closed loopback port stands in for an unreachable API server; no server is needed."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from controller.commands.runner import CommandError, with_kube
from controller.runtime.kube import ApiError, Kube, Resource

PROG = "buildrun-controller test"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig for an API server on a loopback port nothing listens on."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
    return path


def args(tmp_path: Path) -> argparse.Namespace:
    return argparse.Namespace(kubeconfig=str(kubeconfig(tmp_path)), context=None)


class Closes(Kube):
    """The runner's Kube, counting its closes."""

    closed = 0

    async def close(self) -> None:
        type(self).closed += 1
        await super().close()


@pytest.fixture(autouse=True)
def count_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("controller.commands.runner.Kube", Closes)
    Closes.closed = 0


def test_bad_connection_settings_exit_2_without_calling_the_body(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    called = []

    async def body(kube: Kube) -> int:
        called.append(kube)
        return 0

    missing = argparse.Namespace(kubeconfig=str(tmp_path / "missing"))  # no `context`
    assert asyncio.run(with_kube(PROG, missing, body)) == 2
    assert called == []
    assert capsys.readouterr().err == f"{PROG}: kubeconfig {tmp_path / 'missing'} does not exist\n"


@pytest.mark.parametrize(("error", "code", "line"), [
    (CommandError("BuildRun ns/x not found"), 1, "BuildRun ns/x not found"),
    (CommandError("wrong", code=3), 3, "wrong"),
    (ApiError(403, "Forbidden", "no"), 2, "403 Forbidden: no"),
    (TimeoutError("slow"), 2, "cannot reach the API server: slow"),
])
def test_each_failure_of_the_body_is_one_line_and_its_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], error: Exception, code: int,
        line: str) -> None:
    kubes: list[Kube] = []

    async def body(kube: Kube) -> int:
        kubes.append(kube)
        raise error

    assert asyncio.run(with_kube(PROG, args(tmp_path), body)) == code
    assert capsys.readouterr().err == f"{PROG}: {line}\n"
    assert len(kubes) == 1 and Closes.closed == 1


def test_no_api_server_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def body(kube: Kube) -> int:
        await kube.list(NAMESPACES, None)
        return 0

    assert asyncio.run(with_kube(PROG, args(tmp_path), body)) == 2
    assert Closes.closed == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG}: cannot reach the API server: ") and err.count("\n") == 1


def test_the_body_s_exit_code_is_the_command_s(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    async def body(kube: Kube) -> int:
        return 0

    assert asyncio.run(with_kube(PROG, args(tmp_path), body)) == 0
    assert capsys.readouterr().err == "" and Closes.closed == 1

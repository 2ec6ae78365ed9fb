"""The soaks' shared command-line lines."""

from __future__ import annotations

import platform

import pytest

from soak.cli import print_run_header, progress_on_stderr


def test_the_header_names_the_command_as_typed_and_where_it_ran(
        capsys: pytest.CaptureFixture[str]) -> None:
    print_run_header("soak.truth", ["--builds", "3"], "2026-12-06T06:00:00Z")
    out = capsys.readouterr().out.splitlines()
    assert out == ["command: python -m soak.truth --builds 3",
                   f"started: 2026-12-06T06:00:00Z on {platform.node()} "
                   f"({platform.machine()})"]


def test_progress_goes_to_stderr_with_its_name(capsys: pytest.CaptureFixture[str]) -> None:
    progress_on_stderr("truth soak")("t=3s")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "truth soak: t=3s\n")

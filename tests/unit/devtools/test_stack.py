"""devtools.hack and devtools.cluster.stack: a missing or unbuildable component is one clear
line, not a hang."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import hack
from devtools.cluster.stack import TektonStack
from devtools.hack import StackError


def test_a_failing_build_script_names_its_component(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "kwok" / "build"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho 'kwok: ERROR: go not found' >&2\nexit 2\n")
    script.chmod(0o755)
    monkeypatch.setattr(hack, "HACK", tmp_path)
    with pytest.raises(StackError, match=r"^kwok: hack/kwok/build failed with exit code 2"):
        hack.build("kwok")


def test_a_missing_build_script_names_its_component(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hack, "HACK", tmp_path)
    with pytest.raises(StackError, match=r"^tekton: no build script at "):
        hack.build("tekton")


def test_a_missing_binary_names_its_component(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every build "succeeds" but prints an empty folder, as after a half-deleted cache.
    monkeypatch.setattr(hack, "build", lambda component, *args: tmp_path)
    with pytest.raises(StackError) as caught:
        TektonStack(tmp_path / "work")
    assert str(caught.value) == (
        f"kube-controller-manager: {tmp_path}/kube-controller-manager missing "
        "(run hack/build-all)"
    )

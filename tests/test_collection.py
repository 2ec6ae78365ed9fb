"""Every test file in tests/ is collected by a plain `pytest` run: a folder pytest skips
by default (its norecursedirs has `build`) once hid the Build controller's tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_file_is_collected() -> None:
    result = subprocess.run(
        # -m "": whatever a marker expression in addopts may deselect, every file collects.
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "", str(TESTS)], capture_output=True, text=True, cwd=TESTS.parent, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    collected = {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}
    files = {str(p.relative_to(TESTS.parent)) for p in TESTS.rglob("test_*.py")}
    assert files - collected == set(), sorted(files - collected)

"""docs/development.md's "Code map" stays true: every folder it names exists, and every
top-level folder and every Python package in the repo is named in it (a new room gets a
line).

"In the repo" means what git tracks or would track (untracked files it does not
ignore count too, so a new folder fails here before it is committed); hidden
top-level folders (.ci/) are tooling, not rooms.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import PurePosixPath

from tests.doctext import REPO, section

MAP = "docs/development.md"


def code_map() -> dict[str, str]:
    """Folder (without the trailing slash) -> what lives there, from the map's table."""
    rows = re.findall(r"^\| `([^`]+)/` \| (.+) \|$", section(MAP, "Code map"), re.M)
    assert rows, "the Code map has no rows of the form | `folder/` | what |"
    return {folder: what for folder, what in rows}


def repo_files() -> list[PurePosixPath]:
    """Tracked files and untracked ones git does not ignore, relative to the repo."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout
    return [PurePosixPath(line) for line in out.splitlines()
            if line and (REPO / line).exists()]


def rooms(files: list[PurePosixPath]) -> set[str]:
    """Every non-hidden top-level folder, and every folder holding an __init__.py."""
    top = {f.parts[0] for f in files if len(f.parts) > 1 and not f.parts[0].startswith(".")}
    packages = {str(f.parent) for f in files if f.name == "__init__.py"}
    return top | packages


def test_every_folder_in_the_map_exists() -> None:
    missing = [folder for folder in code_map() if not (REPO / folder).is_dir()]
    assert not missing, f"the Code map names folders that do not exist: {missing}"


def test_every_top_level_folder_and_package_is_in_the_map() -> None:
    unmapped = sorted(rooms(repo_files()) - set(code_map()))
    assert not unmapped, f"add these folders to {MAP}'s Code map: {unmapped}"


def test_the_map_says_something_for_each_folder() -> None:
    assert all(len(what.split()) >= 3 for what in code_map().values())


def test_rooms_sees_nested_packages_and_skips_hidden_folders() -> None:
    files = [PurePosixPath(p) for p in (
        ".ci/run", "a/x.py", "a/b/__init__.py", "a/b/c/__init__.py", "README.md")]
    assert rooms(files) == {"a", "a/b", "a/b/c"}

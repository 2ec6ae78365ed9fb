"""The package's layering rules, checked on the import statements of every module.

- `workqueue` imports nothing from `controller` (it is importable on its own);
- `controller.runtime` imports nothing from the BuildRun domain or the process wiring;
- nothing installable (`controller`, `workqueue`) imports the dev tools, tests, soak or
  bench folders, which the wheel does not contain.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# (package folder, module prefixes it must never import)
RULES = [
    ("workqueue", ("controller",)),
    ("controller/runtime", ("controller.buildrun", "controller.app", "controller.cli",
                            "controller.settings")),
    ("controller", ("devtools", "tests", "soak", "bench")),
    ("workqueue", ("devtools", "tests", "soak", "bench")),
]


def imports_of(path: Path, root: Path = REPO) -> list[str]:
    """Absolute module names a file imports (relative imports are resolved too)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]
    return names


@pytest.mark.parametrize(("folder", "forbidden"), RULES, ids=[f"{f}-{b[0]}" for f, b in RULES])
def test_layering(folder: str, forbidden: tuple[str, ...]) -> None:
    files = sorted((REPO / folder).rglob("*.py"))
    assert files, f"no modules under {folder}"
    broken = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in files
        for name in imports_of(path)
        if any(name == prefix or name.startswith(prefix + ".") for prefix in forbidden)
    ]
    assert not broken, "\n".join(broken)


def test_the_rule_sees_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "controller" / "runtime" / "kube.py"
    module.parent.mkdir(parents=True)
    module.write_text("from ..buildrun import states\nimport controller.app\n")
    assert imports_of(module, tmp_path) == [
        "controller.buildrun", "controller.buildrun.states", "controller.app"]

"""The package's layering rules, checked on the import statements of every module.

- `workqueue` imports nothing from `controller` (it is importable on its own);
- `controller.runtime` imports nothing from the BuildRun domain or the process wiring;
- nothing installable (`controller`, `workqueue`) imports the dev tools, tests, soak or
  bench folders, which the wheel does not contain;
- between the folders of `controller/`, imports go one way only (LAYERS): the runtime,
  then Shipwright's shared vocabulary, then the Build domain, the BuildRun domain and
  the build-limit cleanup, then the CLI's commands, then the process; a folder imports
  only the folders listed below it, so no two folders can import each other (a
  folder-level cycle, which the module rules above did not see: `controller/build` and
  `controller/buildrun` once imported each other);
- the run generators (`controller/buildrun/resources/`) import, of the BuildRun domain,
  only each other and the pure modules they share with it (RESOURCES_MAY_IMPORT), never
  the reconciler's observe/plan/act modules or its wiring;
- no benchmark (a module of `bench/` with a `main`) imports another: what two share lives
  in a module that is none (bench/e2e/common.py, bodies.py, peer.py).
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


# controller/'s folders, lowest first, each with the folders (and top-level modules) it may
# import besides itself. `controller.settings` is the process's settings in one module.
LAYERS: dict[str, tuple[str, ...]] = {
    "controller.runtime": (),
    "controller.shipwright": ("controller.runtime",),
    "controller.builds": ("controller.runtime", "controller.shipwright", "controller.settings"),
    "controller.buildrun": ("controller.runtime", "controller.shipwright", "controller.builds",
                            "controller.settings"),
    "controller.buildlimit": ("controller.runtime", "controller.shipwright",
                              "controller.buildrun", "controller.settings"),
    # The CLI's commands besides the controller (history, migrate-storage): clients of
    # the API server that read Shipwright's objects, never a domain's reconciler.
    "controller.commands": ("controller.runtime", "controller.shipwright"),
}


def folder_of(module: str) -> str | None:
    """The `controller.X` folder (or top-level module) a module name belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "controller" and len(parts) > 1 else None


def folder_imports(root: Path = REPO) -> dict[str, set[str]]:
    """For each folder of LAYERS, the other `controller.X` it imports."""
    found: dict[str, set[str]] = {}
    for folder in LAYERS:
        path = root.joinpath(*folder.split("."))
        names = {folder_of(name) for file in sorted(path.rglob("*.py"))
                 for name in imports_of(file, root)}
        found[folder] = {n for n in names if n is not None and n != folder}
    return found


def test_every_controller_folder_has_a_layer() -> None:
    folders = {f"controller.{p.name}" for p in (REPO / "controller").iterdir()
               if (p / "__init__.py").exists()}
    assert folders == set(LAYERS), "give each folder of controller/ its place in LAYERS"


@pytest.mark.parametrize("folder", list(LAYERS))
def test_folders_import_only_the_layers_below(folder: str) -> None:
    extra = folder_imports()[folder] - set(LAYERS[folder])
    assert not extra, f"{folder} imports {sorted(extra)}, which LAYERS does not allow"


def test_layers_are_ordered_lowest_first() -> None:
    """The allowed imports point only at folders earlier in LAYERS (or at modules that
    are no folder), so the allowed graph has no cycle."""
    order = list(LAYERS)
    for index, (folder, allowed) in enumerate(LAYERS.items()):
        assert all(a not in LAYERS or order.index(a) < index for a in allowed), folder


def test_the_folder_rule_sees_a_cycle(tmp_path: Path) -> None:
    for folder in LAYERS:
        (tmp_path.joinpath(*folder.split("."))).mkdir(parents=True)
    (tmp_path / "controller" / "builds" / "validation.py").write_text(
        "from controller.buildrun.resources.params import validate_params\n")
    (tmp_path / "controller" / "buildrun" / "reconciler.py").write_text(
        "from controller.builds import validation\n")
    found = folder_imports(tmp_path)
    assert found["controller.builds"] == {"controller.buildrun"}
    assert found["controller.buildrun"] == {"controller.builds"}
    assert "controller.buildrun" not in LAYERS["controller.builds"]


# What controller/buildrun/resources/ may import of controller.buildrun besides itself:
# the reasons, spec parsing and status result names the generators share with the
# reconciler (as Shipwright's resources package shares its API types, never its reconciler).
RESOURCES = "controller.buildrun.resources"
RESOURCES_MAY_IMPORT = ("controller.buildrun.reasons", "controller.buildrun.spec",
                        "controller.buildrun.status")


def domain_imports_of_resources(root: Path = REPO) -> list[str]:
    """`file imports name` for each import of controller.buildrun outside the generators'
    folder and RESOURCES_MAY_IMPORT, by a module of that folder."""
    folder = root.joinpath(*RESOURCES.split("."))
    allowed = (RESOURCES, *RESOURCES_MAY_IMPORT)
    return [
        f"{path.relative_to(root)} imports {name}"
        for path in sorted(folder.rglob("*.py"))
        for name in imports_of(path, root)
        if name.startswith("controller.buildrun")
        and name != "controller.buildrun"
        and not any(name == a or name.startswith(a + ".") for a in allowed)
    ]


def test_the_generators_import_no_reconciler_module() -> None:
    assert (REPO.joinpath(*RESOURCES.split("."))).is_dir()
    broken = domain_imports_of_resources()
    assert not broken, "\n".join(broken)


def test_the_generators_rule_sees_a_violation(tmp_path: Path) -> None:
    module = tmp_path.joinpath(*RESOURCES.split("."), "taskrun.py")
    module.parent.mkdir(parents=True)
    module.write_text("from controller.buildrun.status import Outcome\n"
                      "from controller.buildrun.resources.steps import JSON\n"
                      "from controller.buildrun.plan import Plan\n"
                      "from ..caches import Caches\n")
    assert domain_imports_of_resources(tmp_path) == [
        f"{module.relative_to(tmp_path)} imports controller.buildrun.plan",
        f"{module.relative_to(tmp_path)} imports controller.buildrun.plan.Plan",
        f"{module.relative_to(tmp_path)} imports controller.buildrun.caches",
        f"{module.relative_to(tmp_path)} imports controller.buildrun.caches.Caches",
    ]


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


def is_benchmark(path: Path) -> bool:
    """A module that runs on its own: it defines `main` at the top level."""
    tree = ast.parse(path.read_text(), str(path))
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "main"
               for node in tree.body)


def benchmark_imports(root: Path = REPO) -> list[str]:
    """`benchmark imports benchmark` for each benchmark of bench/ importing another."""
    def module(path: Path) -> str:
        return ".".join(path.relative_to(root).with_suffix("").parts)
    benches = {module(p): p for p in sorted((root / "bench").rglob("*.py")) if is_benchmark(p)}
    return [
        f"{name} imports {other}"
        for name, path in benches.items()
        for other in sorted({b for i in imports_of(path, root) for b in benches
                             if b != name and (i == b or i.startswith(b + "."))})
    ]


def test_no_benchmark_imports_another() -> None:
    assert any(is_benchmark(p) for p in (REPO / "bench" / "e2e").glob("*.py"))
    broken = benchmark_imports()
    assert not broken, "\n".join(broken)


def test_the_benchmark_rule_sees_a_violation(tmp_path: Path) -> None:
    folder = tmp_path / "bench" / "e2e"
    folder.mkdir(parents=True)
    (folder / "common.py").write_text("def helper() -> None: ...\n")
    (folder / "memory.py").write_text(
        "from bench.e2e.common import helper\nfrom bench.e2e.throughput import body\n"
        "def main() -> None: ...\n")
    (folder / "throughput.py").write_text(
        "from bench.e2e import memory\nasync def main() -> None: ...\n")
    assert benchmark_imports(tmp_path) == [
        "bench.e2e.memory imports bench.e2e.throughput",
        "bench.e2e.throughput imports bench.e2e.memory",
    ]

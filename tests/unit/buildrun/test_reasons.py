"""controller.buildrun.reasons: the reason strings, USER_ERROR_REASONS kept equal to the
reasons the code actually fails a BuildRun with as user errors (the parameter reasons,
shared with the Build domain, are named in controller.shipwright.params), and every reason
the code writes counted under its own label in the finish metrics."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from controller.buildrun import reasons, reconciler
from controller.buildrun.states import Action, Decision
from controller.shipwright import params
from controller.shipwright.params import PARAMETER_REASONS
from tests.harness import metric
from tests.unit.buildrun.test_actions import Rig

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
        "SerialRunWaiting",
        "PodDisrupted",
        "PodDeleted",
        "InfrastructureRetry",
        "InfrastructureRetriesInvalid",
        "BuildRunPendingTimeout",
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


# -- every reason the controller writes is its own metric label ---------------------------

# The modules that decide a finished BuildRun's reason besides a UserError's: the state
# table (canceled, timed out, TaskRun missing, retries exhausted) and the outcome read
# off a finished TaskRun or PipelineRun.
DECIDERS = ("controller.buildrun.states", "controller.buildrun.outcomes")


def reasons_named(module_name: str) -> set[str]:
    """The reasons a module's code names: constants of controller.buildrun.reasons or
    controller.shipwright.params, by their name or as `reasons.X`, a set of them
    (TEKTON_FAILED_REASONS) as its members."""
    module = importlib.import_module(module_name)
    constants = {id(v): v for m in (reasons, params) for k, v in vars(m).items()
                 if k.isupper() and isinstance(v, str | frozenset)}
    found: set[str] = set()
    for node in ast.walk(ast.parse(Path(str(module.__file__)).read_text())):
        if not isinstance(node, ast.Name | ast.Attribute):
            continue
        value = _resolve(node, vars(module))
        if id(value) not in constants:
            continue
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, frozenset):
            found |= {v for v in value if isinstance(v, str)}
    return found


def reasons_the_controller_writes() -> set[str]:
    """Every reason a finished BuildRun can get from this controller, read off the code:
    each UserError's, each the state table and the outcome mapping name, and Tekton's,
    which the outcome keeps as they are (docs/shipwright-api.md, "Status from Tekton")."""
    raised, _ = user_error_reasons_raised()
    return raised.union(*map(reasons_named, DECIDERS)) | reasons.TEKTON_REASONS


def test_the_reason_scan_reads_each_kind_of_reference() -> None:
    """The scan above finds a constant named as `reasons.X` (states.py), one imported by
    name (outcomes.py), a set's members (TEKTON_FAILED_REASONS) and the parameter reasons
    (a UserError's, from controller.shipwright.params): the reasons the label set missed."""
    assert reasons.TASK_RUN_IS_MISSING in reasons_named("controller.buildrun.states")
    outcomes = reasons_named("controller.buildrun.outcomes")
    assert {reasons.VULNERABILITIES_FOUND, reasons.PIPELINE_RUN_FAILED} <= outcomes
    assert reasons.STEP_OOM in outcomes  # only as a member of TEKTON_FAILED_REASONS there
    assert reasons_the_controller_writes() >= PARAMETER_REASONS


def test_every_reason_the_controller_writes_is_its_own_metric_label() -> None:
    written = reasons_the_controller_writes()
    merged = sorted(r for r in written if reasons.metric_reason(r) != r)
    assert not merged, f"counted as {reasons.OTHER_REASON!r}: {merged}"
    # The control: a reason none of the code writes (a status patched by hand) is Other.
    assert "PatchedByHand" not in written
    assert reasons.metric_reason("PatchedByHand") == reasons.OTHER_REASON


@pytest.mark.parametrize("reason", [*sorted(reasons_the_controller_writes()), "PatchedByHand"])
async def test_a_finish_counts_its_reason_in_both_metrics(
    reason: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the reconciler records when it finishes a BuildRun with `reason` (the row
    that decides is replaced, so every reason goes through the one finish path):
    buildrun_completed_total and the completion histogram under that reason, and
    "PatchedByHand", the control, under Other."""
    rig = Rig()
    rig.buildrun()
    monkeypatch.setattr(reconciler, "decide",
                        lambda _: Decision(Action.FINISH, reason, "the message"))
    label = reason if reason != "PatchedByHand" else reasons.OTHER_REASON
    counted = ("buildrun_completed_total", {"reason": label, "namespace": "ns"})
    timed = ("buildrun_completion_duration_seconds_count", {"reason": label})
    before = [metric(name, **labels) for name, labels in (counted, timed)]
    await rig.reconcile()
    assert rig.condition()["reason"] == reason
    assert [metric(name, **labels) for name, labels in (counted, timed)] == [
        b + 1 for b in before]

"""Shipwright main's env blocklist (#2275) without a server: the list and its setting, the
BuildRun's own env (main's BuildRunFields), and a strategy step's env and the Build's
merged into it (main's applyBuildStrategySteps), for both executors. The cases are main's
(pkg/env/env_test.go, pkg/config/config_test.go, pkg/reconciler/buildrun/resources/
taskrun_test.go); the Build's checks are in tests/unit/builds/test_validation.py."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import orjson
import pytest

from controller.buildrun import reasons
from controller.buildrun.resources.config import SHIPWRIGHT_DEFAULTS, ShipwrightConfig
from controller.buildrun.resources.pipelinerun import generate_pipelinerun
from controller.buildrun.resources.taskrun import generate_taskrun
from controller.buildrun.spec import check_forbidden_env
from controller.runtime.errors import UserError
from controller.shipwright.forbidden_env import (
    ENV_FORBIDDEN_ENV_VAR_NAMES,
    NO_FORBIDDEN_ENV,
    SHIPWRIGHT_MAIN_DEFAULT,
    ForbiddenEnvNames,
)
from tests.doctext import section
from tests.unit.buildrun.test_taskrun import BUILD, BUILDRUN, STRATEGY

MAIN = ForbiddenEnvNames.of(SHIPWRIGHT_MAIN_DEFAULT)
MAIN_CONFIG = replace(SHIPWRIGHT_DEFAULTS, forbidden_env=MAIN)


@pytest.mark.parametrize(("name", "forbidden"), [
    ("LD_PRELOAD", True), ("LD_LIBRARY_PATH", True), ("LD_AUDIT", True),
    ("LD_DEBUG", True), ("LD_PROFILE", True), ("LD_CUSTOM", True), ("BASH_ENV", True),
    ("BASH_FUNC_exploit%%", True), ("ENV", True), ("CDPATH", True),
    ("PYTHONSTARTUP", True), ("PERL5OPT", True), ("PERLLIB", True), ("PERL5LIB", True),
    ("RUBYOPT", True), ("NODE_OPTIONS", True),
    ("MY_VAR", False), ("BUILD_LOGLEVEL", False), ("HTTP_PROXY", False), ("HOME", False),
    ("PATH", False), ("", False),
])
def test_mains_default_list(name: str, forbidden: bool) -> None:
    assert MAIN.forbids(name) is forbidden
    assert not NO_FORBIDDEN_ENV.forbids(name)


def test_unset_or_empty_forbids_nothing_as_v0_20_13() -> None:
    """Where main falls back to its default list, v0.20.13's behaviour stays (issue 43)."""
    for environ in ({}, {ENV_FORBIDDEN_ENV_VAR_NAMES: ""}, {ENV_FORBIDDEN_ENV_VAR_NAMES: " , "}):
        blocklist = ForbiddenEnvNames.from_env(environ)
        assert not blocklist
        assert not blocklist.forbids("LD_PRELOAD")
    assert ShipwrightConfig.from_env({}).forbidden_env == NO_FORBIDDEN_ENV


def test_a_list_is_read_as_main_reads_it() -> None:
    for value in ("CUSTOM_VAR,MALICIOUS_*", " CUSTOM_VAR , MALICIOUS_* "):
        blocklist = ShipwrightConfig.from_env({ENV_FORBIDDEN_ENV_VAR_NAMES: value}).forbidden_env
        assert blocklist == ForbiddenEnvNames(frozenset({"CUSTOM_VAR"}), ("MALICIOUS_",))
        assert blocklist.forbids("CUSTOM_VAR")
        assert blocklist.forbids("MALICIOUS_INJECT")
        assert not blocklist.forbids("LD_PRELOAD")
        assert not blocklist.forbids("CUSTOM_VAR_2")  # exact unless it ends in *
    spelled = ",".join(SHIPWRIGHT_MAIN_DEFAULT)
    assert ForbiddenEnvNames.from_env({ENV_FORBIDDEN_ENV_VAR_NAMES: spelled}) == MAIN
    # "*" alone is the empty prefix, as in main: every name.
    assert ForbiddenEnvNames.of(["*"]).forbids("ANYTHING")


def with_env(buildrun: dict[str, Any], env: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(buildrun)
    out["spec"]["env"] = env
    return out


def test_the_buildruns_first_forbidden_name_fails_it() -> None:
    buildrun = with_env(BUILDRUN, [{"name": "OK", "value": "1"},
                                   {"name": "BASH_ENV", "value": "/tmp/evil.sh"},
                                   {"name": "LD_PRELOAD", "value": "x"}])
    check_forbidden_env(buildrun, NO_FORBIDDEN_ENV)
    with pytest.raises(UserError) as exc:
        check_forbidden_env(buildrun, MAIN)
    assert exc.value.reason == reasons.SPEC_ENV_NAME_FORBIDDEN == "SpecEnvNameForbidden"
    assert exc.value.message == (
        'environment variable "BASH_ENV" is forbidden for security reasons')


def test_a_long_name_is_quoted_bounded() -> None:
    with pytest.raises(UserError) as exc:
        check_forbidden_env(with_env(BUILDRUN, [{"name": "LD_" + "x" * 100_000}]), MAIN)
    assert len(exc.value.message) < 200


def strategy_with_step_env(env: list[dict[str, Any]]) -> dict[str, Any]:
    strategy = copy.deepcopy(STRATEGY)
    strategy["spec"]["steps"][0]["env"] = env
    return strategy


GENERATORS = [generate_taskrun, generate_pipelinerun]


@pytest.mark.parametrize("generator", GENERATORS)
@pytest.mark.parametrize("name", ["LD_PRELOAD", "BASH_ENV"])
def test_a_strategy_step_with_a_forbidden_name_fails_generation(generator: Any,
                                                                name: str) -> None:
    strategy = strategy_with_step_env([{"name": name, "value": "/tmp/x"}])
    generator(BUILDRUN, BUILD, strategy, "builder", SHIPWRIGHT_DEFAULTS)  # v0.20.13: runs
    with pytest.raises(UserError) as exc:
        generator(BUILDRUN, BUILD, strategy, "builder", MAIN_CONFIG)
    assert exc.value.reason == reasons.TASK_RUN_GENERATION_FAILED
    assert exc.value.message == (
        f'BuildStrategy step "build" defines forbidden environment variable "{name}"')


@pytest.mark.parametrize("generator", GENERATORS)
def test_safe_step_env_is_generated(generator: Any) -> None:
    strategy = strategy_with_step_env([{"name": "DOCKER_CONFIG", "value": "/tekton/home/.docker"},
                                       {"name": "MY_VAR", "value": "safe-value"}])
    run = generator(BUILDRUN, BUILD, strategy, "builder", MAIN_CONFIG)
    assert b'"DOCKER_CONFIG"' in orjson.dumps(run)


@pytest.mark.parametrize("generator", GENERATORS)
def test_a_forbidden_name_in_the_builds_env_fails_the_merge(generator: Any) -> None:
    """A Build registered before the setting was on (its check refuses it now): main's
    MergeEnvVars refuses the name as it merges it into each step, with its other errors."""
    build = copy.deepcopy(BUILD)
    build["spec"]["env"] = [{"name": "LD_AUDIT", "value": "x"}, {"name": "X", "value": "1"}]
    strategy = strategy_with_step_env([{"name": "X", "value": "2"}])
    with pytest.raises(UserError) as exc:
        generator(BUILDRUN, build, strategy, "builder", MAIN_CONFIG)
    assert exc.value.reason == reasons.TASK_RUN_GENERATION_FAILED
    assert exc.value.message == (
        'error(s) occurred merging environment variables into BuildStrategy "kaniko" steps: '
        '[environment variable "LD_AUDIT" is forbidden for security reasons, '
        'environment variable "X" already exists]')


def test_readme_spells_mains_default_list_as_the_code_has_it() -> None:
    """README's "Settings" gives main's list to copy into FORBIDDEN_ENV_VAR_NAMES."""
    settings = section("README.md", "Settings")
    assert f"`{','.join(SHIPWRIGHT_MAIN_DEFAULT)}`" in settings

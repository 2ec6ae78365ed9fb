"""controller.buildrun.resources.params: parameter values checked as Shipwright checks them (every
reason it has, in its order) and put into the TaskRun as Shipwright puts them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.buildrun.resources.params import apply_param_values, env_var_name, references_param
from controller.runtime.errors import UserError
from controller.shipwright.params import (
    EMPTY_ARRAY_ITEM_PARAMETER_VALUES,
    INCOMPLETE_CONFIG_MAP_VALUE_PARAMETER_VALUES,
    INCOMPLETE_SECRET_VALUE_PARAMETER_VALUES,
    INCONSISTENT_PARAMETER_VALUES,
    MISSING_PARAMETER_VALUES,
    RESTRICTED_PARAMETERS_IN_USE,
    UNDEFINED_PARAMETER,
    WRONG_PARAMETER_VALUE_TYPE,
    is_reserved,
    override_params,
    validate_params,
)

JSON = dict[str, Any]

PARAMS: list[JSON] = [
    {"name": "s"},                                   # string, required
    {"name": "d", "default": "x"},                   # string with a default
    {"name": "a", "type": "array"},                  # array, required
    {"name": "ad", "type": "array", "defaults": []},  # array with defaults
]
REQUIRED: list[JSON] = [{"name": "s", "value": "1"}, {"name": "a", "values": [{"value": "1"}]}]
CM = {"name": "cm", "key": "k"}
SECRET = {"name": "sec", "key": "k"}


@pytest.mark.parametrize("name", ["shp-x", "BUILDER_IMAGE", "DOCKERFILE", "CONTEXT_DIR"])
def test_reserved_names(name: str) -> None:
    assert is_reserved(name)
    with pytest.raises(UserError) as exc:
        validate_params([{"name": name, "value": "1"}], [], [{"name": name}])
    assert exc.value.reason == RESTRICTED_PARAMETERS_IN_USE


def test_reserved_names_are_exact_or_prefix() -> None:
    assert not is_reserved("dockerfile")
    assert not is_reserved("SHP-X")


def test_valid_values_pass() -> None:
    validate_params(REQUIRED, [{"name": "d", "configMapValue": CM}], PARAMS)
    validate_params([*REQUIRED, {"name": "ad", "values": [{"secretValue": SECRET}]}], [],
                    PARAMS)


@pytest.mark.parametrize(("build", "run", "reason"), [
    ([{"name": "nope", "value": "1"}], [], UNDEFINED_PARAMETER),
    ([], [{"name": "nope", "value": "1"}], UNDEFINED_PARAMETER),
    ([{"name": "s", "values": [{"value": "1"}]}], [], WRONG_PARAMETER_VALUE_TYPE),
    ([{"name": "a", "value": "1"}], [], WRONG_PARAMETER_VALUE_TYPE),
    ([{"name": "s", "value": "1"}], [], MISSING_PARAMETER_VALUES),
    ([{"name": "a", "values": []}], [], MISSING_PARAMETER_VALUES),
    ([{"name": "s"}, {"name": "a", "values": []}], [], MISSING_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "d", "value": "1", "secretValue": SECRET}], [],
     INCONSISTENT_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "ad", "values": [{"value": "1", "configMapValue": CM}]}], [],
     INCONSISTENT_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "ad", "values": [{"value": "1"}, {}]}], [],
     EMPTY_ARRAY_ITEM_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "ad", "values": ["legacy-string"]}], [],
     EMPTY_ARRAY_ITEM_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "d", "configMapValue": {"name": "cm", "key": ""}}], [],
     INCOMPLETE_CONFIG_MAP_VALUE_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "ad", "values": [{"configMapValue": {"key": "k"}}]}], [],
     INCOMPLETE_CONFIG_MAP_VALUE_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "d", "secretValue": {"name": "", "key": "k"}}], [],
     INCOMPLETE_SECRET_VALUE_PARAMETER_VALUES),
    ([*REQUIRED, {"name": "d", "value": "1"}, {"name": "d", "value": "2"}], [],
     INCONSISTENT_PARAMETER_VALUES),
])
def test_rejections(build: list[JSON], run: list[JSON], reason: str) -> None:
    with pytest.raises(UserError) as exc:
        validate_params(build, run, PARAMS)
    assert exc.value.reason == reason


def test_buildrun_value_completes_the_build() -> None:
    validate_params([{"name": "a", "values": [{"value": "1"}]}], [{"name": "s", "value": "2"}],
                    PARAMS)


def test_restricted_is_checked_before_undefined_and_type_before_missing() -> None:
    with pytest.raises(UserError) as exc:
        validate_params([{"name": "shp-x", "value": "1"}, {"name": "nope", "value": "1"}], [],
                        PARAMS)
    assert exc.value.reason == RESTRICTED_PARAMETERS_IN_USE
    with pytest.raises(UserError) as exc:
        validate_params([{"name": "s", "values": []}], [], PARAMS)
    assert exc.value.reason == WRONG_PARAMETER_VALUE_TYPE


def test_messages_are_bounded_for_hostile_input() -> None:
    values = [{"name": "x" * 250 + str(i), "value": "1"} for i in range(64)]
    with pytest.raises(UserError) as exc:
        validate_params(values, [], [])
    assert len(exc.value.message) < 1500
    assert "and 54 more" in exc.value.message


def test_override_params_keeps_build_order_and_replaces_by_name() -> None:
    merged = override_params([{"name": "a", "value": "1"}, {"name": "b", "value": "1"}],
                             [{"name": "b", "value": "2"}, {"name": "c", "value": "2"}])
    assert merged == [{"name": "a", "value": "1"}, {"name": "b", "value": "2"},
                      {"name": "c", "value": "2"}]


@pytest.mark.parametrize(("text", "expected"), [
    ("$(params.tool)", True), ("$(params['tool'])", True), ('$(params["tool"])', True),
    ("$(params.toolbox)", True),  # Shipwright's match is a prefix match
    ("$(params.other)", False), ("tool", False),
])
def test_references_param(text: str, expected: bool) -> None:
    assert references_param({"args": [text]}, "tool") is expected
    assert references_param({"env": [{"name": "X", "value": text}]}, "tool") is expected


def taskrun(*steps: JSON) -> JSON:
    return {"spec": {"params": [], "taskSpec": {"steps": [copy.deepcopy(s) for s in steps]}}}


USES_S = {"name": "one", "args": ["$(params.s)"], "env": [{"name": "E", "value": "1"}]}
USES_A = {"name": "two", "args": ["$(params.a[*])"]}


def test_values_configmap_and_secret_become_env_from() -> None:
    tr = taskrun(USES_S, USES_A)
    apply_param_values(
        tr, [{"name": "s", "configMapValue": {**CM, "format": "--x=${CONFIGMAP_VALUE}"}}],
        [{"name": "a", "values": [{"value": "v"}, {"secretValue": SECRET},
                                  {"configMapValue": CM}]}],
        PARAMS)
    cm_var = env_var_name("SHP_CONFIGMAP_PARAM_", "cm", "k")
    secret_var = env_var_name("SHP_SECRET_PARAM_", "sec", "k")
    assert tr["spec"]["params"] == [
        {"name": "s", "value": f"--x=$({cm_var})"},
        {"name": "a", "value": ["v", f"$({secret_var})", f"$({cm_var})"]},
    ]
    one, two = tr["spec"]["taskSpec"]["steps"]
    assert one["env"] == [{"name": cm_var, "valueFrom": {"configMapKeyRef": CM}},
                          {"name": "E", "value": "1"}]
    assert two["env"] == [
        {"name": cm_var, "valueFrom": {"configMapKeyRef": CM}},
        {"name": secret_var, "valueFrom": {"secretKeyRef": SECRET}},
    ]


def test_env_var_names_are_deterministic_and_distinct() -> None:
    name = env_var_name("SHP_SECRET_PARAM_", "sec", "k")
    assert name == env_var_name("SHP_SECRET_PARAM_", "sec", "k")
    assert len(name) == len("SHP_SECRET_PARAM_") + 5
    assert name != env_var_name("SHP_SECRET_PARAM_", "sec", "k2")


def test_defaults_are_left_to_tekton() -> None:
    tr = taskrun(USES_S)
    apply_param_values(tr, [{"name": "d"}, {"name": "ad"}], [], PARAMS)
    assert tr["spec"]["params"] == []


def test_an_empty_string_item_is_a_value_as_in_shipwright() -> None:
    validate_params([*REQUIRED, {"name": "ad", "values": [{"value": "-x"}, {"value": ""}]}],
                    [], PARAMS)
    tr = taskrun(USES_A)
    apply_param_values(tr, [{"name": "a", "values": [{"value": "-x"}, {"value": ""}]}], [],
                       PARAMS)
    assert tr["spec"]["params"] == [{"name": "a", "value": ["-x", ""]}]


def test_inputs_are_not_modified() -> None:
    build: list[JSON] = [{"name": "s", "secretValue": SECRET},
                         {"name": "a", "values": [{"value": "1"}]}]
    run = [{"name": "d", "value": "2"}]
    before = copy.deepcopy((build, run, PARAMS))
    validate_params(build, run, PARAMS)
    apply_param_values(taskrun(USES_S, USES_A), build, run, PARAMS)
    assert (build, run, PARAMS) == before

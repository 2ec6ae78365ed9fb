"""controller.buildrun.spec: durations, the Build reference, overrides, parameter values."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.buildrun import reasons
from controller.buildrun.spec import (
    build_name,
    effective_build,
    format_duration,
    parse_duration,
)
from controller.runtime.errors import UserError


def buildrun(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "br", "namespace": "ns", "uid": "u-1"}, "spec": spec}


BUILD_SPEC: dict[str, Any] = {
    "strategy": {"name": "kaniko", "kind": "BuildStrategy"},
    "source": {"git": {"url": "https://example.com/repo.git"}},
    "output": {"image": "registry.example.com/app", "pushSecret": "push"},
    "paramValues": [{"name": "a", "value": "build-a"}, {"name": "b", "value": "build-b"}],
    "timeout": "10m",
    "retention": {"atBuildDeletion": True, "ttlAfterFailed": "1h", "ttlAfterSucceeded": "2h"},
}


def user_error(exc_info: pytest.ExceptionInfo[UserError]) -> tuple[str, str]:
    return exc_info.value.reason, exc_info.value.message


# --- parse_duration / format_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("1h1h", 7200.0),
        ("2m3s4ms", 123.004),
        (".5s", 0.5),
        ("1.s", 1.0),
        ("+5s", 5.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("1500us", 0.0015),
        ("1500µs", 0.0015),  # micro sign U+00B5
        ("1500μs", 0.0015),  # greek mu U+03BC
        ("1000000ns", 0.001),
        ("2562047h47m16.854775807s", 9223372036.854775807),  # Go's maximum
    ],
)
def test_parse_duration_accepts_go_syntax(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "expected"),
        ("-5s", "negative"),
        ("-0s", "negative"),
        ("10", "units"),
        ("1.5", "units"),
        ("abc", "units"),
        ("1d", "units"),
        ("s", "units"),
        (".s", "units"),
        ("1 s", "units"),
        (" 1s", "units"),
        ("1s ", "units"),
        ("1S", "units"),
        ("1.2.3s", "units"),
        ("++1s", "units"),
        ("\u0663s", "units"),  # ARABIC-INDIC DIGIT THREE: \d would take it
        ("2562047h47m16.854775808s", "292 years"),
        ("99999999999999999999h", "292 years"),
    ],
)
def test_parse_duration_rejects_everything_else(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as exc_info:
        parse_duration(text)
    assert repr(text) in str(exc_info.value)


def test_parse_duration_quotes_long_input_bounded() -> None:
    with pytest.raises(ValueError) as exc_info:
        parse_duration("x" * 10_000)
    assert len(str(exc_info.value)) < 300


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(600.0, "600s"), (0.3, "0.3s"), (1e-9, "0.000000001s"), (5400.0, "5400s"), (0.0, "0s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_format_duration_round_trips_through_parse(nanos: int) -> None:
    seconds = nanos / 1e9
    text = format_duration(seconds)
    assert "e" not in text  # Go does not read exponents
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-15, abs=1e-9)


# --- build_name


def test_build_name_returns_referenced_build() -> None:
    assert build_name(buildrun({"build": {"name": "my-build"}})) == "my-build"


def test_build_name_is_none_for_embedded_spec() -> None:
    assert build_name(buildrun({"build": {"spec": BUILD_SPEC}})) is None
    assert build_name(buildrun({"build": {"name": "", "spec": BUILD_SPEC}})) is None


def test_build_name_rejects_name_and_spec() -> None:
    with pytest.raises(UserError) as exc_info:
        build_name(buildrun({"build": {"name": "b", "spec": BUILD_SPEC}}))
    assert exc_info.value.reason == reasons.BUILD_RUN_AMBIGUOUS_BUILD


@pytest.mark.parametrize("spec", [{}, {"build": {}}, {"build": {"name": ""}}])
def test_build_name_rejects_neither(spec: dict[str, Any]) -> None:
    with pytest.raises(UserError) as exc_info:
        build_name(buildrun(spec))
    assert exc_info.value.reason == reasons.BUILD_RUN_NO_REF_OR_SPEC


def test_build_name_rejects_buildrun_without_spec() -> None:
    with pytest.raises(UserError) as exc_info:
        build_name({"metadata": {"name": "br"}})
    assert exc_info.value.reason == reasons.BUILD_RUN_NO_REF_OR_SPEC


@pytest.mark.parametrize(
    "name", ["Upper", "under_score", "-lead", "trail-", "a..b", "x" * 254, "sp ace", "ünï"]
)
def test_build_name_rejects_invalid_names(name: str) -> None:
    with pytest.raises(UserError) as exc_info:
        build_name(buildrun({"build": {"name": name}}))
    reason, message = user_error(exc_info)
    assert reason == reasons.INVALID_REFERENCE
    assert "spec.build.name" in message
    assert len(message) < 400


def test_build_name_rejects_other_namespace_and_says_why() -> None:
    with pytest.raises(UserError) as exc_info:
        build_name(buildrun({"build": {"name": "other-ns/build"}}))
    reason, message = user_error(exc_info)
    assert reason == reasons.INVALID_REFERENCE
    assert "'other-ns/build'" in message
    assert "own namespace" in message


@pytest.mark.parametrize("name", ["a", "a.b-c", "x" * 253, "0build"])
def test_build_name_accepts_dns1123_subdomains(name: str) -> None:
    assert build_name(buildrun({"build": {"name": name}})) == name


# --- effective_build


def test_effective_build_from_build_without_overrides() -> None:
    effective = effective_build(buildrun({"build": {"name": "b"}}), BUILD_SPEC)
    assert effective.spec == BUILD_SPEC
    assert effective.strategy_name == "kaniko"
    assert effective.timeout == 600.0
    assert effective.service_account is None
    assert effective.param_values == BUILD_SPEC["paramValues"]
    assert effective.output_image == "registry.example.com/app"
    assert effective.push_secret == "push"
    assert effective.retention == {
        "atBuildDeletion": True,
        "ttlAfterFailed": "1h",
        "ttlAfterSucceeded": "2h",
    }


def test_effective_build_applies_buildrun_overrides() -> None:
    run = buildrun(
        {
            "build": {"name": "b"},
            "serviceAccount": "builder",
            "timeout": "1h",
            "output": {"image": "registry.example.com/other"},
            "paramValues": [{"name": "b", "value": "run-b"},
                            {"name": "c", "values": [{"value": "x"}]}],
            "retention": {"ttlAfterFailed": "5m"},
        }
    )
    effective = effective_build(run, BUILD_SPEC)
    assert effective.timeout == 3600.0
    assert effective.service_account == "builder"
    assert effective.output_image == "registry.example.com/other"
    assert effective.push_secret == "push"  # not overridden: kept from the Build
    assert effective.param_values == [
        {"name": "a", "value": "build-a"},
        {"name": "b", "value": "run-b"},
        {"name": "c", "values": [{"value": "x"}]},
    ]
    assert effective.retention == {
        "atBuildDeletion": True,
        "ttlAfterFailed": "5m",
        "ttlAfterSucceeded": "2h",
    }
    # The snapshot carries the overrides of output, paramValues and timeout.
    assert effective.spec["output"] == {"image": "registry.example.com/other", "pushSecret": "push"}
    assert effective.spec["paramValues"] == effective.param_values
    assert effective.spec["timeout"] == "1h"
    assert effective.spec["retention"] == BUILD_SPEC["retention"]


def test_effective_build_does_not_modify_inputs() -> None:
    run = buildrun({"build": {"name": "b"}, "output": {"pushSecret": "other"}, "timeout": "1m"})
    run_before, build_before = copy.deepcopy(run), copy.deepcopy(BUILD_SPEC)
    effective = effective_build(run, BUILD_SPEC)
    effective.spec["paramValues"].append({"name": "z", "value": "z"})
    assert run == run_before
    assert build_before == BUILD_SPEC


def test_effective_build_minimal_build() -> None:
    spec = {"strategy": {"name": "s"}, "output": {"image": "img"}}
    effective = effective_build(buildrun({"build": {"name": "b"}}), spec)
    assert effective.timeout is None
    assert effective.push_secret is None
    assert effective.param_values == []
    assert effective.retention == {}
    assert effective.spec == spec


def test_effective_build_embedded_spec() -> None:
    run = buildrun({"build": {"spec": BUILD_SPEC}, "serviceAccount": "sa"})
    effective = effective_build(run, BUILD_SPEC)
    assert effective.timeout == 600.0
    assert effective.service_account == "sa"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("output", {"image": "x"}),
        ("output", {}),  # set, if empty: as Go sees a non-nil pointer
        ("paramValues", [{"name": "a", "value": "1"}]),
        ("timeout", "1m"),
        ("timeout", ""),
        # The rest of Shipwright's validate.BuildRunFields list.
        ("env", [{"name": "A", "value": "1"}]),
        ("nodeSelector", {"disk": "ssd"}),
        ("tolerations", [{"key": "k", "operator": "Exists"}]),
        ("schedulerName", ""),
        ("runtimeClassName", "kata"),
        ("stepResources", [{"name": "build", "resources": {}}]),
    ],
)
def test_effective_build_forbids_overrides_of_embedded_spec(field: str, value: Any) -> None:
    run = buildrun({"build": {"spec": BUILD_SPEC}, field: value})
    with pytest.raises(UserError) as exc_info:
        effective_build(run, BUILD_SPEC)
    reason, message = user_error(exc_info)
    assert reason == reasons.BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN
    # Shipwright's words (validate.BuildRunFields), which its integration suite checks.
    assert message == f"cannot use '{field}' override and 'buildSpec' simultaneously"


def test_effective_build_names_the_first_override_in_shipwrights_order() -> None:
    run = buildrun({"build": {"spec": BUILD_SPEC}, "stepResources": [{"name": "b"}],
                    "timeout": "1m", "env": [{"name": "A", "value": "1"}]})
    with pytest.raises(UserError) as exc_info:
        effective_build(run, BUILD_SPEC)
    assert user_error(exc_info)[1] == "cannot use 'env' override and 'buildSpec' simultaneously"


@pytest.mark.parametrize(("where", "env", "reason"), [
    ("build", [{"name": "", "value": "1"}], reasons.SPEC_ENV_NAME_CAN_NOT_BE_BLANK),
    ("run", [{"name": "A", "value": "1"}, {"value": "2"}], reasons.SPEC_ENV_NAME_CAN_NOT_BE_BLANK),
    ("build", [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
     reasons.SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED),
])
def test_effective_build_checks_env_as_shipwright(where: str, env: list[Any],
                                                  reason: str) -> None:
    build_spec = {**BUILD_SPEC, "env": env} if where == "build" else BUILD_SPEC
    run = buildrun({"build": {"name": "b"}, **({"env": env} if where == "run" else {})})
    with pytest.raises(UserError) as exc_info:
        effective_build(run, build_spec)
    assert exc_info.value.reason == reason


def test_effective_build_accepts_empty_value_with_value_from() -> None:
    env = [{"name": "A", "value": "", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]
    effective_build(buildrun({"build": {"name": "b"}}), {**BUILD_SPEC, "env": env})


def test_effective_build_forbids_a_trigger_in_an_embedded_spec() -> None:
    run = buildrun({"build": {"spec": {**BUILD_SPEC, "trigger": {"when": []}}}})
    with pytest.raises(UserError) as exc_info:
        effective_build(run, run["spec"]["build"]["spec"])
    reason, message = user_error(exc_info)
    assert reason == reasons.BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN
    assert message == ("cannot use 'triggers' override in the 'BuildRun', only allowed in "
                       "the 'Build'")


def test_effective_build_allows_empty_lists_with_embedded_spec() -> None:
    run = buildrun({"build": {"spec": BUILD_SPEC}, "env": [], "nodeSelector": {},
                    "tolerations": [], "stepResources": []})
    effective_build(run, BUILD_SPEC)


def test_effective_build_allows_empty_param_values_with_embedded_spec() -> None:
    run = buildrun({"build": {"spec": BUILD_SPEC}, "paramValues": []})
    assert effective_build(run, BUILD_SPEC).param_values == BUILD_SPEC["paramValues"]


@pytest.mark.parametrize("value", ["soon", "0s", "0", "", "-1m", "10"])
def test_effective_build_rejects_bad_buildrun_timeout(value: str) -> None:
    with pytest.raises(UserError) as exc_info:
        effective_build(buildrun({"build": {"name": "b"}, "timeout": value}), BUILD_SPEC)
    reason, message = user_error(exc_info)
    assert reason == reasons.INVALID_TIMEOUT
    assert message.startswith("spec.timeout:")
    assert repr(value) in message


def test_effective_build_rejects_bad_build_timeout() -> None:
    with pytest.raises(UserError) as exc_info:
        effective_build(buildrun({"build": {"name": "b"}}), {**BUILD_SPEC, "timeout": "1 day"})
    reason, message = user_error(exc_info)
    assert reason == reasons.INVALID_TIMEOUT
    assert "the Build's spec.timeout" in message
    assert "'1 day'" in message


@pytest.mark.parametrize(
    ("run_spec", "build_spec", "field"),
    [
        ({"serviceAccount": "Bad_SA"}, BUILD_SPEC, "spec.serviceAccount"),
        ({"serviceAccount": "ns/sa"}, BUILD_SPEC, "spec.serviceAccount"),
        ({}, {**BUILD_SPEC, "strategy": {"name": "Kaniko!"}}, "the Build's spec.strategy.name"),
        ({}, {**BUILD_SPEC, "strategy": {"name": ""}}, "the Build's spec.strategy.name"),
        ({"output": {"pushSecret": "other/secret"}}, BUILD_SPEC, "spec.output.pushSecret"),
        (
            {},
            {**BUILD_SPEC, "output": {"image": "i", "pushSecret": "UPPER"}},
            "the Build's spec.output.pushSecret",
        ),
    ],
)
def test_effective_build_rejects_invalid_references(
    run_spec: dict[str, Any], build_spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(UserError) as exc_info:
        effective_build(buildrun({"build": {"name": "b"}, **run_spec}), build_spec)
    reason, message = user_error(exc_info)
    assert reason == reasons.INVALID_REFERENCE
    assert message.startswith(field)


@pytest.mark.parametrize(
    ("run_retention", "build_retention", "field"),
    [
        ({"ttlAfterFailed": "1 week"}, {}, "spec.retention.ttlAfterFailed"),
        ({}, {"ttlAfterSucceeded": "-1h"}, "the Build's spec.retention.ttlAfterSucceeded"),
    ],
)
def test_effective_build_rejects_bad_retention(
    run_retention: dict[str, Any], build_retention: dict[str, Any], field: str
) -> None:
    run = buildrun({"build": {"name": "b"}, "retention": run_retention})
    with pytest.raises(UserError) as exc_info:
        effective_build(run, {**BUILD_SPEC, "retention": build_retention})
    reason, message = user_error(exc_info)
    assert reason == reasons.INVALID_RETENTION
    assert message.startswith(field)


def test_effective_build_accepts_zero_ttl() -> None:
    run = buildrun({"build": {"name": "b"}, "retention": {"ttlAfterSucceeded": "0s"}})
    assert effective_build(run, BUILD_SPEC).retention["ttlAfterSucceeded"] == "0s"



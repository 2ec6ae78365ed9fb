"""What a BuildRun asks for: its Build, the BuildRun's overrides, and parameter values.

Everything here checks user input, so every rejection is a UserError naming the
offending field and value; messages stay bounded whatever the input holds.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from controller.buildrun.reasons import (
    BUILD_RUN_AMBIGUOUS_BUILD,
    BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN,
    BUILD_RUN_NO_REF_OR_SPEC,
    INVALID_REFERENCE,
    INVALID_RETENTION,
    INVALID_TIMEOUT,
    SPEC_ENV_NAME_CAN_NOT_BE_BLANK,
    SPEC_ENV_NAME_FORBIDDEN,
    SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED,
)
from controller.runtime.errors import UserError
from controller.runtime.name_rules import DNS1123_SUBDOMAIN_MAX, dns1123_subdomain_errors
from controller.runtime.text import truncate
from controller.shipwright.forbidden_env import ForbiddenEnvNames, forbidden_message

# Go's time.ParseDuration units, in nanoseconds (both micro signs are accepted by Go).
_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5
    "μs": 1_000,  # U+03BC
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
# "ms" before "m" so the longer unit wins; [0-9] because \d also matches non-ASCII digits.
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
# Go durations are int64 nanoseconds; Tekton could not parse anything longer.
_DURATION_MAX_NS = 2**63 - 1

# Bounds on names quoted in messages: a hostile spec may hold 64 names of 253 characters.
_QUOTED_MAX = 64
_LISTED_MAX = 10


def parse_duration(text: str) -> float:
    """Seconds in a Go duration ("90s", "10m", "1h30m", "1.5h", "300ms"); ValueError otherwise.

    Negative durations are rejected; positivity is left to callers (a zero TTL is fine).
    """
    quoted = _quote(text)
    if text.startswith("-"):
        raise ValueError(f"invalid duration {quoted}: negative durations are not allowed")
    body = text.removeprefix("+")
    if body == "0":  # Go's one unit-less duration
        return 0.0
    if not body:
        raise ValueError(f"invalid duration {quoted}: expected e.g. 90s, 10m or 1h30m")
    total_ns = Decimal(0)
    pos = 0
    while pos < len(body):
        part = _DURATION_PART.match(body, pos)
        if part is None:
            raise ValueError(
                f"invalid duration {quoted}: expected numbers with units "
                "(ns, us, ms, s, m, h), e.g. 90s, 10m or 1h30m"
            )
        total_ns += Decimal(part[1]) * _UNIT_NS[part[2]]
        pos = part.end()
    if total_ns > _DURATION_MAX_NS:
        raise ValueError(f"invalid duration {quoted}: longer than about 292 years")
    return float(total_ns / 1_000_000_000)


def format_duration(seconds: float) -> str:
    """A Go duration string for `seconds` ("600s", "0.3s"), in whole nanoseconds."""
    nanos = min(round(seconds * 1_000_000_000), _DURATION_MAX_NS)
    whole, frac = divmod(nanos, 1_000_000_000)
    return f"{whole}.{frac:09d}".rstrip("0").rstrip(".") + "s"


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() of `seconds`: "1h0m0s", "1m30s", "1.5s", "300ms", "0s"."""
    nanos = min(round(seconds * 1_000_000_000), _DURATION_MAX_NS)
    if nanos == 0:
        return "0s"
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size:
                whole, frac = divmod(nanos, size)
                digits = len(str(size)) - 1
                if not digits:
                    return f"{whole}{unit}"
                return f"{whole}.{frac:0{digits}d}".rstrip("0").rstrip(".") + unit
    whole_s, frac = divmod(nanos, 1_000_000_000)
    hours, rest = divmod(whole_s, 3600)
    minutes, secs = divmod(rest, 60)
    sec_text = f"{secs}.{frac:09d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{sec_text}"
    if minutes:
        return f"{minutes}m{sec_text}"
    return sec_text


def build_name(buildrun: dict[str, Any]) -> str | None:
    """The Build to fetch, or None when the BuildRun embeds spec.build.spec."""
    build = (buildrun.get("spec") or {}).get("build") or {}
    name = build.get("name") or ""
    embedded = build.get("spec") is not None
    if name and embedded:
        raise UserError(
            BUILD_RUN_AMBIGUOUS_BUILD,
            "spec.build sets both name and spec: set name to use a Build, or spec to embed one",
        )
    if embedded:
        return None
    if not name:
        raise UserError(
            BUILD_RUN_NO_REF_OR_SPEC,
            "spec.build sets neither name nor spec: set name to use a Build, or spec to embed one",
        )
    _check_reference("spec.build.name", name)
    return str(name)


@dataclass(frozen=True)
class EffectiveBuild:
    """The Build spec after BuildRun overrides; every reference and duration in it is valid."""

    spec: dict[str, Any]  # snapshot for status.buildSpec
    strategy_name: str
    timeout: float | None  # seconds, > 0
    service_account: str | None  # None: Tekton's default
    param_values: list[dict[str, Any]]  # not yet checked against the strategy: params.py
    output_image: str
    push_secret: str | None
    retention: dict[str, Any]  # CRD shape: ttlAfterFailed, ttlAfterSucceeded, atBuildDeletion


# BuildRun fields that override the Build and count as set when present (the rest: when
# non-empty), as Shipwright's pointers and collections.
_POINTERS = ("output", "timeout", "schedulerName", "runtimeClassName")


def effective_build(buildrun: dict[str, Any], build_spec: dict[str, Any]) -> EffectiveBuild:
    """Merge a BuildRun's overrides into `build_spec`: the fetched Build's spec, or the
    BuildRun's own spec.build.spec when it embeds one. Neither input is modified."""
    run = buildrun.get("spec") or {}
    embedded = (run.get("build") or {}).get("spec") is not None
    where = "spec.build.spec" if embedded else "the Build's spec"
    if embedded:
        # An embedded spec already says everything; a second place to say it is ambiguous.
        # Shipwright's validate.BuildRunFields, its checks in its order and its words: set
        # (pointers) or non-empty (lists, maps).
        build_spec_trigger = (run.get("build") or {}).get("spec", {}).get("trigger")
        for field in ("output", "paramValues", "env", "timeout", "trigger", "nodeSelector",
                      "tolerations", "schedulerName", "runtimeClassName", "stepResources"):
            if field == "trigger":
                if build_spec_trigger is not None:
                    raise UserError(BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN,
                                    "cannot use 'triggers' override in the 'BuildRun', only "
                                    "allowed in the 'Build'")
                continue
            value = run.get(field)
            if value is not None and (field in _POINTERS or len(value) > 0):
                raise UserError(BUILD_RUN_BUILD_FIELD_OVERRIDE_FORBIDDEN,
                                f"cannot use '{field}' override and 'buildSpec' simultaneously")
    spec = copy.deepcopy(build_spec)

    run_output = {k: v for k, v in (run.get("output") or {}).items() if v}
    output = {**(spec.get("output") or {}), **run_output}
    spec["output"] = output
    push_secret = output.get("pushSecret") or None
    if push_secret is not None:
        origin = "spec" if "pushSecret" in run_output else where
        _check_reference(f"{origin}.output.pushSecret", push_secret)

    run_values = copy.deepcopy(run.get("paramValues") or [])
    overridden = {value.get("name") for value in run_values}
    param_values = [v for v in spec.get("paramValues") or [] if v.get("name") not in overridden]
    param_values += run_values
    if param_values:
        spec["paramValues"] = param_values

    timeout: float | None = None
    chosen = _override(run, spec, "timeout", "spec.timeout", f"{where}.timeout")
    if chosen is not None:
        text, field = chosen
        try:
            timeout = parse_duration(text)
        except ValueError as exc:
            raise UserError(INVALID_TIMEOUT, f"{field}: {exc}") from None
        if timeout <= 0:
            raise UserError(INVALID_TIMEOUT, f"{field}: timeout {_quote(text)} must be positive")
        spec["timeout"] = text

    for env, field in ((build_spec.get("env") or [], f"{where}.env"),
                       (run.get("env") or [], "spec.env")):
        _check_env(env, field)

    strategy_name = (spec.get("strategy") or {}).get("name") or ""
    _check_reference(f"{where}.strategy.name", strategy_name)
    service_account = run.get("serviceAccount") or None
    if service_account is not None:
        _check_reference("spec.serviceAccount", service_account)

    build_retention = spec.get("retention") or {}
    retention: dict[str, Any] = {}
    for key in ("ttlAfterFailed", "ttlAfterSucceeded"):
        chosen = _override(
            run.get("retention") or {},
            build_retention,
            key,
            f"spec.retention.{key}",
            f"{where}.retention.{key}",
        )
        if chosen is not None:
            text, field = chosen
            try:
                parse_duration(text)
            except ValueError as exc:
                raise UserError(INVALID_RETENTION, f"{field}: {exc}") from None
            retention[key] = text
    if "atBuildDeletion" in build_retention:
        retention["atBuildDeletion"] = build_retention["atBuildDeletion"]

    return EffectiveBuild(
        spec=spec,
        strategy_name=str(strategy_name),
        timeout=timeout,
        service_account=service_account,
        param_values=param_values,
        output_image=str(output.get("image") or ""),
        push_secret=push_secret,
        retention=retention,
    )


def _override(
    run: dict[str, Any], build: dict[str, Any], key: str, run_field: str, build_field: str
) -> tuple[str, str] | None:
    """(value, field it came from): the BuildRun's value when set, else the Build's."""
    if run.get(key) is not None:
        return str(run[key]), run_field
    if build.get(key) is not None:
        return str(build[key]), build_field
    return None


def _check_env(env: list[dict[str, Any]], field: str) -> None:
    """Shipwright's validate.Env on a Build's env (the pod would be refused otherwise);
    applied to the BuildRun's env too."""
    for index, var in enumerate(env):
        if not var.get("name"):
            raise UserError(SPEC_ENV_NAME_CAN_NOT_BE_BLANK,
                            f"{field}[{index}]: name for environment variable must not be blank")
        if var.get("value") and var.get("valueFrom") is not None:
            raise UserError(SPEC_ENV_ONLY_ONE_OF_VALUE_OR_VALUE_FROM_MUST_BE_SPECIFIED,
                            f"{field}[{index}] ({_quote(var['name'])}): only one of value or "
                            "valueFrom must be specified")


def check_forbidden_env(buildrun: dict[str, Any], forbidden: ForbiddenEnvNames) -> None:
    """Shipwright main's last check of a BuildRun's own fields (validate.BuildRunFields,
    #2275): the first name of its spec.env on the FORBIDDEN_ENV_VAR_NAMES blocklist fails
    it, in main's words. Nothing is forbidden unless that setting is set."""
    for var in (buildrun.get("spec") or {}).get("env") or []:
        name = str(var.get("name") or "")
        if forbidden.forbids(name):
            raise UserError(SPEC_ENV_NAME_FORBIDDEN,
                            forbidden_message(truncate(name, _QUOTED_MAX)))


def _check_reference(field: str, name: str) -> None:
    if not dns1123_subdomain_errors(name):
        return
    # "other-ns/name" is the usual shape of this mistake: say why it cannot work.
    hint = "; a BuildRun may only use objects in its own namespace" if "/" in name else ""
    raise UserError(
        INVALID_REFERENCE,
        f"{field} {_quote(name)} is not a valid object name (lowercase letters, digits, '-' "
        f"and '.', at most {DNS1123_SUBDOMAIN_MAX} characters){hint}",
    )


def _reject(reason: str, preamble: str, names: list[str]) -> None:
    if not names:
        return
    unique = sorted(set(names))
    listed = ", ".join(_quote(n) for n in unique[:_LISTED_MAX])
    more = f" and {len(unique) - _LISTED_MAX} more" if len(unique) > _LISTED_MAX else ""
    raise UserError(reason, f"{preamble}: {listed}{more}")


def _quote(text: str) -> str:
    return repr(truncate(text, _QUOTED_MAX))

"""Parameter values checked against a strategy's parameters, as Shipwright v0.20.13
checks them (pkg/validate/params.go): for a Build by its Build controller, which may
leave values to its BuildRuns, and for a BuildRun by its reconciler, with the Build's
values overridden by the BuildRun's. Both domains use it; how the values then reach the
TaskRun is `controller.buildrun.resources.params`.

A value is `{name, value}`, `{name, configMapValue}`, `{name, secretValue}` (a single
value) or `{name, values: [...]}` whose items are `{value | configMapValue |
secretValue}`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from controller.runtime.errors import UserError
from controller.runtime.text import truncate

JSON = dict[str, Any]

# The parameter reasons, spelled as Shipwright spells them for Builds (BuildReason) and
# BuildRuns alike.
RESTRICTED_PARAMETERS_IN_USE = "RestrictedParametersInUse"
UNDEFINED_PARAMETER = "UndefinedParameter"
WRONG_PARAMETER_VALUE_TYPE = "WrongParameterValueType"
MISSING_PARAMETER_VALUES = "MissingParameterValues"
INCONSISTENT_PARAMETER_VALUES = "InconsistentParameterValues"
EMPTY_ARRAY_ITEM_PARAMETER_VALUES = "EmptyArrayItemParameterValues"
INCOMPLETE_CONFIG_MAP_VALUE_PARAMETER_VALUES = "IncompleteConfigMapValueParameterValues"
INCOMPLETE_SECRET_VALUE_PARAMETER_VALUES = "IncompleteSecretValueParameterValues"
# All of them: each domain's closed set of failure reasons includes these (the Build's
# all but MISSING_PARAMETER_VALUES: a Build may leave a value to its BuildRuns).
PARAMETER_REASONS: frozenset[str] = frozenset({
    RESTRICTED_PARAMETERS_IN_USE,
    UNDEFINED_PARAMETER,
    WRONG_PARAMETER_VALUE_TYPE,
    MISSING_PARAMETER_VALUES,
    INCONSISTENT_PARAMETER_VALUES,
    EMPTY_ARRAY_ITEM_PARAMETER_VALUES,
    INCOMPLETE_CONFIG_MAP_VALUE_PARAMETER_VALUES,
    INCOMPLETE_SECRET_VALUE_PARAMETER_VALUES,
})

RESERVED_PREFIX = "shp-"
# Shipwright's fixed list of reserved names besides the prefix (IsSystemReservedParameter).
RESERVED_NAMES = frozenset({"BUILDER_IMAGE", "DOCKERFILE", "CONTEXT_DIR"})

_QUOTED_MAX = 64
_LISTED_MAX = 10


def is_reserved(name: str) -> bool:
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIX)


def override_params(build_values: list[JSON], run_values: list[JSON]) -> list[JSON]:
    """The Build's values with the BuildRun's replacing those of the same name (Shipwright's
    OverrideParams; it returns them in map order, we keep the Build's order, then the
    BuildRun's new names)."""
    merged: dict[str, JSON] = {}
    for entry in [*build_values, *run_values]:
        merged[entry.get("name") or ""] = entry
    return list(merged.values())


def set_value_keys(entry: JSON) -> list[str]:
    """Which of value, configMapValue, secretValue a single value sets (none for an item
    that is not an object, which Shipwright's CRD does not admit)."""
    if not isinstance(entry, dict):
        return []
    return [k for k in ("value", "configMapValue", "secretValue") if entry.get(k) is not None]


def _incomplete(entry: JSON, kind: str) -> bool:
    ref = entry.get(kind) if isinstance(entry, dict) else None
    return ref is not None and (not ref.get("name") or not ref.get("key"))


def validate_params(build_values: list[JSON], run_values: list[JSON],
                    strategy_params: list[JSON], *, ignore_missing: bool = False) -> None:
    """Raise the UserError Shipwright's validate.BuildRunParameters fails a BuildRun with,
    checking in its order; also a name set twice in one list (which Shipwright resolves
    by map order, so unpredictably). `ignore_missing` is Shipwright's
    ignoreMissingParameters, for a Build, which may leave values to its BuildRuns."""
    for values, where in ((build_values, "the Build's"), (run_values, "the BuildRun's")):
        twice = [n for n, c in Counter(v.get("name") or "" for v in values).items() if c > 1]
        _reject(INCONSISTENT_PARAMETER_VALUES,
                f"The following parameters are set more than once in {where} paramValues",
                twice)
    values = override_params(build_values, run_values)
    declared: dict[str, JSON] = {}
    for param in strategy_params:
        declared.setdefault(param.get("name") or "", param)
    names = [v.get("name") or "" for v in values]
    _reject(RESTRICTED_PARAMETERS_IN_USE,
            "The following parameters are restricted and cannot be set",
            [n for n in names if is_reserved(n)])
    _reject(UNDEFINED_PARAMETER,
            "The following parameters are not defined in the build strategy",
            [n for n in names if n not in declared])

    given = {v.get("name") or "": v for v in values}
    wrong_type: list[str] = []
    missing: list[str] = []
    empty_item: list[str] = []
    multi: list[str] = []
    incomplete_cm: list[str] = []
    incomplete_secret: list[str] = []
    for name, param in declared.items():
        entry = given.get(name)
        if param.get("type") == "array":
            if entry is not None:
                if set_value_keys(entry):
                    wrong_type.append(name)
                items = entry.get("values") or []
                if any(not set_value_keys(item) for item in items):
                    empty_item.append(name)
                if any(len(set_value_keys(item)) > 1 for item in items):
                    multi.append(name)
                incomplete_cm += [name for item in items if _incomplete(item, "configMapValue")]
                incomplete_secret += [name for item in items if _incomplete(item, "secretValue")]
            if param.get("defaults") is None and (entry is None or entry.get("values") is None):
                missing.append(name)
        else:
            if entry is not None:
                if entry.get("values") is not None:
                    wrong_type.append(name)
                if len(set_value_keys(entry)) > 1:
                    multi.append(name)
                if _incomplete(entry, "configMapValue"):
                    incomplete_cm.append(name)
                if _incomplete(entry, "secretValue"):
                    incomplete_secret.append(name)
            if param.get("default") is None and (entry is None or not set_value_keys(entry)):
                missing.append(name)
    _reject(WRONG_PARAMETER_VALUE_TYPE,
            "The values for the following parameters are using the wrong type", wrong_type)
    _reject(MISSING_PARAMETER_VALUES,
            "The following parameters are required but no value has been provided",
            [] if ignore_missing else missing)
    _reject(INCONSISTENT_PARAMETER_VALUES,
            "The following parameters have more than one of 'configMapValue', 'secretValue', "
            "and 'value' set", multi)
    _reject(EMPTY_ARRAY_ITEM_PARAMETER_VALUES,
            "The values for the following array parameters are containing at least one item "
            "where none of 'configMapValue', 'secretValue', and 'value' are set", empty_item)
    _reject(INCOMPLETE_CONFIG_MAP_VALUE_PARAMETER_VALUES,
            "The values for the following parameters are containing a 'configMapValue' with "
            "an empty 'name' or 'key'", incomplete_cm)
    _reject(INCOMPLETE_SECRET_VALUE_PARAMETER_VALUES,
            "The values for the following parameters are containing a 'secretValue' with an "
            "empty 'name' or 'key'", incomplete_secret)


def _reject(reason: str, preamble: str, names: list[str]) -> None:
    """Shipwright's message (`preamble: a, b`, names unquoted, as its integration suite
    expects word for word), bounded: each name cut, at most _LISTED_MAX listed."""
    if not names:
        return
    unique = list(dict.fromkeys(names))
    listed = ", ".join(truncate(n, _QUOTED_MAX) for n in unique[:_LISTED_MAX])
    more = f" and {len(unique) - _LISTED_MAX} more" if len(unique) > _LISTED_MAX else ""
    raise UserError(reason, f"{preamble}: {listed}{more}")


def quoted(text: str) -> str:
    return repr(truncate(text, _QUOTED_MAX))

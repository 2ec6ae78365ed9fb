"""Parameter values: checked against the strategy as Shipwright checks them, and put into
the TaskRun as Shipwright puts them.

A value is `{name, value}`, `{name, configMapValue}`, `{name, secretValue}` (a single
value) or `{name, values: [...]}` whose items are `{value | configMapValue |
secretValue}`. A ConfigMap or Secret value becomes an environment variable
(`valueFrom`) on every step that references the parameter, and the parameter's value
is `$(NAME)` (or `format` with `${CONFIGMAP_VALUE}` / `${SECRET_VALUE}` replaced by
it), so Kubernetes resolves it when the pod starts.

Reference: Shipwright v0.20's pkg/validate/params.go and
pkg/reconciler/buildrun/resources/params.go.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from controller.buildrun.reasons import (
    EMPTY_ARRAY_ITEM_PARAMETER_VALUES,
    INCOMPLETE_CONFIG_MAP_VALUE_PARAMETER_VALUES,
    INCOMPLETE_SECRET_VALUE_PARAMETER_VALUES,
    INCONSISTENT_PARAMETER_VALUES,
    MISSING_PARAMETER_VALUES,
    RESTRICTED_PARAMETERS_IN_USE,
    UNDEFINED_PARAMETER,
    WRONG_PARAMETER_VALUE_TYPE,
)
from controller.buildrun.status import truncate
from controller.runtime.errors import UserError

JSON = dict[str, Any]

RESERVED_PREFIX = "shp-"
# Shipwright's fixed list of reserved names besides the prefix (IsSystemReservedParameter).
RESERVED_NAMES = frozenset({"BUILDER_IMAGE", "DOCKERFILE", "CONTEXT_DIR"})

CONFIGMAP_ENV_PREFIX = "SHP_CONFIGMAP_PARAM_"
SECRET_ENV_PREFIX = "SHP_SECRET_PARAM_"
_SUFFIX_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_SUFFIX_LENGTH = 5

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


def references_param(step: JSON, name: str) -> bool:
    """Whether a step's command, args or env values mention parameter `name` (a prefix
    match, as Shipwright's isStepReferencingParameter)."""
    needles = (f"$(params.{name}", f"$(params['{name}']", f'$(params["{name}"]')
    texts = [*(step.get("command") or []), *(step.get("args") or []),
             *((var.get("value") or "") for var in step.get("env") or [])]
    return any(needle in str(text) for text in texts for needle in needles)


def _single(entry: JSON) -> list[str]:
    """Which of value, configMapValue, secretValue a single value sets (none for an item
    that is not an object, which Shipwright's CRD does not admit)."""
    if not isinstance(entry, dict):
        return []
    return [k for k in ("value", "configMapValue", "secretValue") if entry.get(k) is not None]


def _incomplete(entry: JSON, kind: str) -> bool:
    ref = entry.get(kind) if isinstance(entry, dict) else None
    return ref is not None and (not ref.get("name") or not ref.get("key"))


def validate_params(build_values: list[JSON], run_values: list[JSON],
                    strategy_params: list[JSON]) -> None:
    """Raise the UserError Shipwright's validate.BuildRunParameters fails a BuildRun with,
    checking in its order; also a name set twice in one list (which Shipwright resolves
    by map order, so unpredictably)."""
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
                if _single(entry):
                    wrong_type.append(name)
                items = entry.get("values") or []
                if any(not _single(item) for item in items):
                    empty_item.append(name)
                if any(len(_single(item)) > 1 for item in items):
                    multi.append(name)
                incomplete_cm += [name for item in items if _incomplete(item, "configMapValue")]
                incomplete_secret += [name for item in items if _incomplete(item, "secretValue")]
            if param.get("defaults") is None and (entry is None or entry.get("values") is None):
                missing.append(name)
        else:
            if entry is not None:
                if entry.get("values") is not None:
                    wrong_type.append(name)
                if len(_single(entry)) > 1:
                    multi.append(name)
                if _incomplete(entry, "configMapValue"):
                    incomplete_cm.append(name)
                if _incomplete(entry, "secretValue"):
                    incomplete_secret.append(name)
            if param.get("default") is None and (entry is None or not _single(entry)):
                missing.append(name)
    _reject(WRONG_PARAMETER_VALUE_TYPE,
            "The values for the following parameters are using the wrong type", wrong_type)
    _reject(MISSING_PARAMETER_VALUES,
            "The following parameters are required but no value has been provided", missing)
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


def env_var_name(prefix: str, name: str, key: str) -> str:
    """The variable a ConfigMap or Secret key reaches the steps through. Shipwright draws
    the 5-character suffix at random; ours is a hash of (name, key), so a regenerated
    TaskRun is the same TaskRun."""
    digest = hashlib.sha256(f"{prefix}\0{name}\0{key}".encode()).digest()
    return prefix + "".join(_SUFFIX_CHARS[b % len(_SUFFIX_CHARS)]
                            for b in digest[:_SUFFIX_LENGTH])


def _add_env_from(taskrun: JSON, param: str, prefix: str, ref: JSON) -> str:
    kind = "configMapKeyRef" if prefix == CONFIGMAP_ENV_PREFIX else "secretKeyRef"
    name, key = ref.get("name") or "", ref.get("key") or ""
    steps = taskrun["spec"]["taskSpec"]["steps"]
    variable = next(
        (var["name"] for step in steps for var in step.get("env") or []
         if var.get("name", "").startswith(prefix)
         and ((var.get("valueFrom") or {}).get(kind) or {}).get("name") == name
         and ((var.get("valueFrom") or {}).get(kind) or {}).get("key") == key),
        None,
    ) or env_var_name(prefix, name, key)
    for step in steps:
        if not references_param(step, param):
            continue
        env = step.get("env") or []
        if any(var.get("name") == variable for var in env):
            continue
        step["env"] = [{"name": variable, "valueFrom": {kind: {"name": name, "key": key}}},
                       *env]
    return variable


def _resolve(taskrun: JSON, param: str, item: JSON) -> str | None:
    """A single value's text in the TaskRun; None when it sets none."""
    if not isinstance(item, dict):
        return None
    for kind, prefix, placeholder in (("configMapValue", CONFIGMAP_ENV_PREFIX,
                                       "${CONFIGMAP_VALUE}"),
                                      ("secretValue", SECRET_ENV_PREFIX, "${SECRET_VALUE}")):
        ref = item.get(kind)
        if ref is not None:
            expression = f"$({_add_env_from(taskrun, param, prefix, ref)})"
            fmt = ref.get("format")
            return expression if fmt is None else str(fmt).replace(placeholder, expression)
    value = item.get("value")
    return None if value is None else str(value)


def apply_param_values(taskrun: JSON, build_values: list[JSON], run_values: list[JSON],
                       strategy_params: list[JSON]) -> None:
    """Append the parameter values to the TaskRun's spec.params (Shipwright's
    HandleTaskRunParam): a declared default is left to Tekton when no value is given."""
    declared: dict[str, JSON] = {}
    for param in strategy_params:
        declared.setdefault(param.get("name") or "", param)
    for entry in override_params(build_values, run_values):
        name = entry.get("name") or ""
        definition = declared.get(name)
        if definition is None:
            raise UserError(UNDEFINED_PARAMETER,
                            f"the parameter {_quote(name)} is not defined in the build strategy")
        if definition.get("type") == "array":
            if entry.get("values") is None:
                if definition.get("defaults") is None:
                    raise UserError(MISSING_PARAMETER_VALUES,
                                    f"unexpected parameter without any value: {_quote(name)}")
                continue
            items = []
            for index, item in enumerate(entry["values"]):
                text = _resolve(taskrun, name, item)
                if text is None:
                    raise UserError(EMPTY_ARRAY_ITEM_PARAMETER_VALUES, "unexpected parameter "
                                    f"without any value: {_quote(name)}[{index}]")
                items.append(text)
            taskrun["spec"]["params"].append({"name": name, "value": items})
        else:
            if not _single(entry):
                if definition.get("default") is None:
                    raise UserError(MISSING_PARAMETER_VALUES,
                                    f"unexpected parameter without any value: {_quote(name)}")
                continue
            text = _resolve(taskrun, name, entry)
            taskrun["spec"]["params"].append({"name": name, "value": text or ""})


def _reject(reason: str, preamble: str, names: list[str]) -> None:
    if not names:
        return
    unique = list(dict.fromkeys(names))
    listed = ", ".join(_quote(n) for n in unique[:_LISTED_MAX])
    more = f" and {len(unique) - _LISTED_MAX} more" if len(unique) > _LISTED_MAX else ""
    raise UserError(reason, f"{preamble}: {listed}{more}")


def _quote(text: str) -> str:
    return repr(truncate(text, _QUOTED_MAX))
